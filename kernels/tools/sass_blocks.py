#!/usr/bin/env python3
"""What a hopper variant's hot loop costs in instructions, without a GPU: compiles the configs that
match --config (through hopper_check.py, so the same NVRTC/ptxas flags and registry configs), then
disassembles each cubin with nvdisasm and prints its hot basic blocks: those with at least 4 wgmma
(HGMMA: a key tile's Q·Kᵀ and P·V) or 32 MUFU (a tile's softmax exponentials), with their
instruction count per warp and the opcodes that make it up (U* = the uniform datapath).

A steady key tile is its wgmma block and its softmax block (a wgmma block may also hold a masked
tile's bound checks, ISETP/FSEL pairs, that an unmasked tile branches past); comparing the counts
of two configs (or two revisions) shows where a change adds or removes issue slots.

    export LD_LIBRARY_PATH=$PWD/target/cuda-wheels/nvidia/cu13/lib
    python3 kernels/tools/sass_blocks.py --config "HEAD_DIM=128 NUM_WARPS=8 BLOCK_N=128 STAGES=3 SCHEDULE=0"

nvdisasm: --nvdisasm PATH, else $CUDA_HOME/bin/nvdisasm, else target/cuda-wheels/nvidia/cu13/bin
(NVIDIA's PyPI wheel from 13.2 on reads ptxas 13.0's cubins: `pip install --no-deps --target
target/cuda-wheels "nvidia-cuda-nvdisasm>=13.2"`).
"""

import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

TOOLS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(TOOLS_DIR, "..", ".."))
WHEEL_BIN = os.path.join(ROOT, "target", "cuda-wheels", "nvidia", "cu13", "bin")

LABEL = re.compile(r"^\s*\.(L_x_\d+):")
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(.*?);")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def find_nvdisasm(given):
    candidates = [given] if given else []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvdisasm"))
    candidates.append(os.path.join(WHEEL_BIN, "nvdisasm"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    sys.exit(
        "error: no nvdisasm (tried " + ", ".join(candidates) + "); install NVIDIA's wheel: "
        'pip install --no-deps --target target/cuda-wheels "nvidia-cuda-nvdisasm>=13.2"'
    )


def basic_blocks(sass):
    """[(label, [opcode, ...])] in program order; the opcode without predicate or modifiers."""
    blocks = [("entry", [])]
    for line in sass.splitlines():
        label = LABEL.match(line)
        if label:
            blocks.append((label.group(1), []))
            continue
        ins = INSTRUCTION.match(line)
        if ins:
            blocks[-1][1].append(PREDICATE.sub("", ins.group(1)).split()[0].split(".")[0])
    return blocks


def hot_blocks(blocks):
    for label, ops in blocks:
        count = collections.Counter(ops)
        if count["HGMMA"] >= 4 or count["MUFU"] >= 32:
            yield label, ops, count


def report(name, sass):
    print(name)
    for label, ops, count in hot_blocks(basic_blocks(sass)):
        uniform = sum(v for k, v in count.items() if k.startswith("U"))
        top = ", ".join(f"{op} {n}" for op, n in count.most_common(8))
        print(f"  {label:<8} {len(ops):4} instructions  HGMMA {count['HGMMA']:2}  uniform {uniform:3}  | {top}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help='knobs the configs must match, e.g. "HEAD_DIM=128 Q_REGS=1"')
    parser.add_argument("--dtypes", default="f16", help="f16, bf16 or both (comma-separated)")
    parser.add_argument("--nvdisasm", help="path of nvdisasm")
    args = parser.parse_args()
    nvdisasm = find_nvdisasm(args.nvdisasm)
    with tempfile.TemporaryDirectory() as keep:
        check = subprocess.run(
            [sys.executable, os.path.join(TOOLS_DIR, "hopper_check.py"), "--keep", keep, "--config", args.config,
             "--dtypes", args.dtypes],
            capture_output=True,
            text=True,
        )
        cubins = sorted(glob.glob(os.path.join(keep, "*.cubin")))
        if not cubins:
            sys.exit("error: no config compiled: " + (check.stderr.strip().splitlines() or ["none matches --config"])[-1])
        for cubin in cubins:
            res = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"error: nvdisasm failed on {os.path.basename(cubin)}: {res.stderr.strip()}")
            report(os.path.basename(cubin)[: -len(".cubin")], res.stdout)
        # hopper_check's verdict (spills, serialised wgmma) is worth seeing beside the counts.
        if check.returncode != 0:
            print(check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr.strip())
            sys.exit(1)


if __name__ == "__main__":
    main()
