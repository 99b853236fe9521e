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

--cubin FILE [--function NAME_PART ...]: instead of hopper's configs, the hot blocks of each function
of another cubin whose name contains every NAME_PART (e.g. FlashAttention-3's forward kernels, taken
out of its library with `cuobjdump -xelf all`): the same counts for another implementation.

--q-regs-live: instead of the blocks, a verdict per Q_REGS=1 config: whether any instruction but
the Q load writes a register that a later Q·Kᵀ reads (exit 1 if one does; see q_regs_clobbers).

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


def instructions(sass):
    """[(text without predicate, predicated?)] in program order and {label: index of its first}."""
    ins, labels = [], {}
    for line in sass.splitlines():
        label = LABEL.match(line)
        if label:
            labels[label.group(1)] = len(ins)
            continue
        m = INSTRUCTION.match(line)
        if m:
            text = m.group(1).strip()
            ins.append((PREDICATE.sub("", text), PREDICATE.match(text) is not None))
    return ins, labels


def basic_blocks(sass):
    """[(label, [opcode, ...])] in program order; the opcode without predicate or modifiers."""
    ins, labels = instructions(sass)
    starts = [("entry", 0)] + list(labels.items())
    ends = [start for _, start in starts[1:]] + [len(ins)]
    return [
        (label, [ins[i][0].split()[0].split(".")[0] for i in range(start, end)])
        for (label, start), end in zip(starts, ends)
    ]


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


# ---- --q-regs-live: Q's register fragments must survive from their load to every Q·Kᵀ -----------------
#
# With Q_REGS=1 each thread loads its fragments of Q from shared memory once (LDS) and every key
# tile's Q·Kᵀ wgmma reads them (HGMMA with a register A operand and a K-major B: no .tnspB). ptxas
# 13.0 has been seen to hand those registers to other values inside the key loop (the unoverlapped
# loop, OVERLAP=0: P's fragments landed on Q's), so that every tile after the first multiplies
# garbage; the PTX is right, only the machine code is not. The check: no instruction other than an
# LDS writes a register that a Q·Kᵀ HGMMA then reads, along any path of the control-flow graph.

BRANCH_TARGET = re.compile(r"`\(\.(L_x_\d+)\)")
QK_HGMMA = re.compile(r"^HGMMA\.64x\d+x16(?:\.\w+)+ R\d+, R(\d+), gdesc\[\w+\](?!\.tnspB)")
DEST = re.compile(r"^(\S+)\s+R(\d+)\b")
NO_DEST = ("ST", "RED", "BAR", "SYNCS", "BRA", "EXIT", "RET", "WARPGROUP", "HGMMA", "BSSY", "BSYNC", "CALL", "NOP")


def successors(ins, labels, i):
    text, predicated = ins[i]
    op = text.split()[0]
    out = []
    if op.startswith("BRA"):
        target = BRANCH_TARGET.search(text)
        if target:
            out.append(labels[target.group(1)])
        if predicated:
            out.append(i + 1)
    elif op.startswith(("EXIT", "RET")):
        if predicated:
            out.append(i + 1)
    else:
        out.append(i + 1)
    return [j for j in out if j < len(ins)]


def written_registers(text):
    """General registers an instruction writes (its first operand, with the width its opcode says)."""
    op = text.split()[0]
    if op.startswith(NO_DEST):
        return set()
    m = DEST.match(text)
    if not m:
        return set()
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    return {int(m.group(2)) + k for k in range(width)}


def q_regs_clobbers(sass):
    """(Q fragment registers, [(writer, reader)]): non-LDS writes that reach a Q·Kᵀ read of their register."""
    ins, labels = instructions(sass)
    reads = {}
    for i, (text, _) in enumerate(ins):
        m = QK_HGMMA.match(text)
        if m:
            reads[i] = set(range(int(m.group(1)), int(m.group(1)) + 4))
    q_regs = set().union(*reads.values()) if reads else set()
    # Each instruction's writes and successors once, not once per walk.
    writes = [written_registers(text) for text, _ in ins]
    succ = [successors(ins, labels, i) for i in range(len(ins))]
    clobbers = []
    for i, (text, _) in enumerate(ins):
        hit = writes[i] & q_regs
        if not hit or text.startswith("LDS"):
            continue
        for reg in hit:
            seen, todo = set(), list(succ[i])
            while todo:
                j = todo.pop()
                if j in seen:
                    continue
                seen.add(j)
                if reg in reads.get(j, ()):
                    clobbers.append((text, ins[j][0]))
                    break
                if reg not in writes[j]:
                    todo.extend(succ[j])
    return q_regs, clobbers


FUNCTION = re.compile(r"^\s*//-+ \.text\.(\S+) -+\s*$", re.M)


def disassemble(nvdisasm, cubin):
    """The SASS text of `cubin` (exits with nvdisasm's message if it fails)."""
    res = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"error: nvdisasm failed on {os.path.basename(cubin)}: {res.stderr.strip()}")
    return res.stdout


def report_functions(nvdisasm, cubin, wanted):
    """The hot blocks of each function of `cubin` whose name contains every string of `wanted`."""
    parts = FUNCTION.split(disassemble(nvdisasm, cubin))
    matched = [(name, body) for name, body in zip(parts[1::2], parts[2::2]) if all(w in name for w in wanted)]
    if not matched:
        sys.exit(f"error: no function of {os.path.basename(cubin)} has {wanted} in its name")
    for name, body in matched:
        report(name, body)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help='knobs the configs must match, e.g. "HEAD_DIM=128 Q_REGS=1"')
    parser.add_argument(
        "--cubin",
        help="instead of --config: the hot blocks of each function of this cubin (another kernel's, e.g. one "
        "that cuobjdump -xelf took out of a library) whose name contains every --function",
    )
    parser.add_argument("--function", action="append", default=[], help="with --cubin: a substring of the name")
    parser.add_argument("--dtypes", default="f16", help="f16, bf16 or both (comma-separated)")
    parser.add_argument("--nvdisasm", help="path of nvdisasm")
    parser.add_argument(
        "--q-regs-live",
        action="store_true",
        help="instead of the hot blocks: check that no Q_REGS fragment register is overwritten before a Q·Kᵀ reads it",
    )
    args = parser.parse_args()
    nvdisasm = find_nvdisasm(args.nvdisasm)
    if args.cubin:
        report_functions(nvdisasm, args.cubin, args.function)
        return
    if not args.config:
        sys.exit("error: give --config (hopper's configs) or --cubin")
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
        failed = False
        for cubin in cubins:
            sass = disassemble(nvdisasm, cubin)
            name = os.path.basename(cubin)[: -len(".cubin")]
            if args.q_regs_live:
                q_regs, clobbers = q_regs_clobbers(sass)
                verdict = "no Q·Kᵀ with Q in registers" if not q_regs else "ok" if not clobbers else "CLOBBERED"
                print(f"{verdict:<10} {name}" + (f"  ({len(clobbers)} writes, e.g. {clobbers[0][0]!r})" if clobbers else ""))
                failed = failed or bool(clobbers)
            else:
                report(name, sass)
        # hopper_check's verdict (spills, serialised wgmma) is worth seeing beside the counts.
        if check.returncode != 0:
            print(check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr.strip())
            sys.exit(1)
        if failed:
            sys.exit("error: ptxas reused Q's fragment registers inside the key loop in the configs marked CLOBBERED")


if __name__ == "__main__":
    main()
