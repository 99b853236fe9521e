#!/usr/bin/env python3
"""Proves that a refactor of the kernels changed no instruction: compiles every variant of
`hopper.cu` (the registry's knob domains and constraints, both dtypes, D 64 and 128) and every
config of `micro_hopper.cu` (`xtask micro`'s, crates/attn-measure/src/micro.rs) with NVRTC, as the
registry does (compute_90a, the host's flags from `cargo xtask kernels --nvrtc-flags`, the kernels'
folder then the CUDA headers on the include path, the ABI's and the knobs' defines), from the
kernels of two git revisions, and compares the PTX byte for byte, kernel entry by kernel entry:
the order of the entries, the hash NVRTC puts in internal names and the numbering of basic-block
labels are set aside, since moving a kernel into a header changes them and no instruction.

    export LD_LIBRARY_PATH=$PWD/target/cuda-wheels/nvidia/cu13/lib
    python3 kernels/tools/ptx_identity.py BEFORE [AFTER]   # AFTER: the working tree
    python3 kernels/tools/ptx_identity.py BEFORE --config "HEAD_DIM=128 SCHEDULE=1 CHAIN=1" --every 7
    python3 kernels/tools/ptx_identity.py BEFORE --impl decode --impl mma --every 13

--config "K=V ..." (repeatable) and --every N instead take `hopper.cu`'s configs from the registry
(`cargo xtask kernels --configs hopper`, every knob: Q_REGS, CHAIN, STREAM_K, the copy warp's
Q_STAGES 2 and the rest), both dtypes: those matching any --config, and of them (or of all, with
--every alone) every N-th; the micro's configs are then left out. --impl NAME (repeatable) takes
instead the configs, kernel file and architecture of any registered implementation, prefill or
decode (`cargo xtask kernels --configs NAME`), filtered by --config and thinned by --every alike:
e.g. mma.cu and decode.cu, which share `mma_ptx.cuh`.

Causal masks, windows, GQA and varlen are run-time parameters of one compiled kernel (no define),
so the variants here cover them. Prints the count of identical variants and each that differs;
exits 1 if any does. A variant BEFORE's source refuses with a static_assert (a knob value added
since, e.g. BLOCK_N 176) is counted as new, not compared. NVRTC is given no -lineinfo, so the PTX
carries no `.loc` or `.file` line: moving code between a kernel and its headers cannot hide behind
line info, and a variant whose PTX has any is reported (the comparison is of the whole text).
"""

import argparse
import ctypes
import itertools
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from hopper_check import host_flags, kernels_at, parse_config, xtask_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = os.path.join(ROOT, "target/cuda-wheels/nvidia/cu13")

nvrtc = ctypes.CDLL(os.path.join(CUDA, "lib/libnvrtc.so.13"))


def compile_ptx(source: str, options: list[str]) -> str:
    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None))
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    result = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    if result != 0:
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"{' '.join(options)}:\n{log.value.decode()}")
    size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)))
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetPTX(prog, ptx))
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def canonical(ptx: str) -> list[str]:
    """The PTX's kernel entries, sorted, with NVRTC's per-source hash in internal names and the
    function index in basic-block labels replaced: what is left is each entry's instructions."""
    text = re.sub(r"_INTERNAL_[0-9a-f_]+_kernel_cu_[0-9a-f]+", "_INTERNAL_", ptx)
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
    text = re.sub(r"\s*// \.globl\s+\S+", "", text)
    head, *entries = re.split(r"(?=^\.visible \.entry )", text, flags=re.M)
    return [head.strip()] + sorted(e.strip() for e in entries)


def check(code: int) -> None:
    if code != 0:
        raise RuntimeError(f"NVRTC error {code}")


def hopper_variants():
    """(name, defines) of hopper.cu: HOPPER_KNOBS' domains under the registry's constraints."""
    for dtype, d in itertools.product(["ATTN_DTYPE_F16", "ATTN_DTYPE_BF16"], [64, 128]):
        for warps, block_n, stages, overlap, pingpong, schedule in itertools.product(
                [4, 8, 12], [64, 128, 176], [2, 3, 4], [0, 1], [0, 1], [0, 1]):
            if warps == 12 and d != 64:
                continue
            if pingpong and (warps < 8 or not overlap):
                continue
            # BLOCK_N 176: two consumer warpgroups at most, and the shared-memory limit (the
            # registry's constraints); 64 and 128 keep every combination they always had here.
            if block_n == 176 and (warps == 12 or 1024 + 16 * warps * d * 2 + stages * 2 * block_n * d * 2
                                   + 8 * (1 + 4 * stages) + 24 * schedule > 232448):
                continue
            knobs = dict(BLOCK_M=16 * warps, BLOCK_N=block_n, NUM_WARPS=warps, STAGES=stages,
                         OVERLAP=overlap, PINGPONG=pingpong, SCHEDULE=schedule)
            yield "hopper.cu", dtype, d, knobs, "compute_90a"


def registry_variants(wanted, every, impl="hopper"):
    """(file, dtype, D, knobs, arch) of implementation `impl` from the registry's valid configs
    (every knob), both dtypes: those matching any of `wanted` (all if none), then every
    `every`-th of them."""
    lines = xtask_lines("kernels", "--configs", impl)
    head = dict(item.split("=", 1) for item in lines[0].split()) if lines and lines[0].startswith("FILE=") else {}
    file, arch = head.get("FILE", "hopper.cu"), head.get("ARCH", "compute_90a")
    filters = [parse_config(w) for w in wanted]
    configs = [parse_config(line) for line in lines if line.startswith("HEAD_DIM=")]
    configs = [c for c in configs
               if not filters or any(all(c.get(k) == v for k, v in f.items()) for f in filters)]
    for cfg in configs[::every]:
        knobs = {k: v for k, v in cfg.items() if k not in ("HEAD_DIM", "SHARED_BYTES")}
        for dtype in ["ATTN_DTYPE_F16", "ATTN_DTYPE_BF16"]:
            yield file, dtype, cfg["HEAD_DIM"], knobs, arch


def micro_variants():
    """(name, defines) of micro_hopper.cu: micro_configs(Hopper) at D 64 and 128, under the H100's
    227 KiB, with TILES as `xtask micro` sets it by default."""
    for dtype, d in itertools.product(["ATTN_DTYPE_F16", "ATTN_DTYPE_BF16"], [64, 128]):
        for warps, block_n, stages in itertools.product([4, 8, 12], [64, 128], [1, 2, 3, 4]):
            if warps == 12 and d != 64:
                continue
            shared = 1024 + 16 * warps * d * 2 + stages * 2 * block_n * d * 2
            if shared + 8 * (1 + 4 * stages) > 232448:
                continue
            knobs = dict(BLOCK_M=16 * warps, BLOCK_N=block_n, NUM_WARPS=warps, STAGES=stages,
                         PRODUCER_WARPS=4, TENSOR_MAPS=1, SHARED_BYTES=shared, TILES=64)
            yield "micro_hopper.cu", dtype, d, knobs, "compute_90a"


def ptx_of(kernels: str, variant, flags) -> str:
    file, dtype, d, knobs, arch = variant
    with open(os.path.join(kernels, file)) as f:
        source = f.read()
    options = [f"--gpu-architecture={arch}", *flags, f"-I{kernels}", f"-I{CUDA}/include",
               f"-D{dtype}", f"-DHEAD_DIM={d}"] + [f"-D{k}={v}" for k, v in sorted(knobs.items())]
    return compile_ptx(source, options)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", default=None)
    ap.add_argument("--config", action="append", default=[], help="registry configs matching K=V ... (repeatable)")
    ap.add_argument("--every", type=int, default=None, help="every N-th of the registry's (matching) configs")
    ap.add_argument("--impl", action="append", default=[], help="an implementation's registry configs (repeatable)")
    args = ap.parse_args()
    before_rev, after_rev = args.before, args.after
    if args.impl or args.config or args.every:
        variants = []
        for impl in args.impl or ["hopper"]:
            found = list(registry_variants(args.config, args.every or 1, impl))
            if not found:
                raise SystemExit(f"no valid {impl} config matches {args.config} (cargo xtask kernels --configs {impl})")
            variants += found
    else:
        variants = list(hopper_variants()) + list(micro_variants())
    flags = host_flags()  # today's host flags for both revisions: the comparison is of the sources
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "before"))
        os.makedirs(os.path.join(tmp, "after"))
        before = kernels_at(before_rev, os.path.join(tmp, "before"))
        after = kernels_at(after_rev, os.path.join(tmp, "after"))
        jobs = int(os.environ.get("JOBS", "2"))

        def compare(variant):
            after_ptx = ptx_of(after, variant, flags)
            if any(line.lstrip().startswith((".loc", ".file")) for line in after_ptx.splitlines()):
                raise RuntimeError(f"{variant}: PTX with line info (.loc/.file): the flags changed")
            try:
                before_ptx = ptx_of(before, variant, flags)
            except RuntimeError as e:
                # A knob value BEFORE's source refuses (its static_assert): a new variant.
                if "static assertion failed" in str(e):
                    return None
                raise
            return canonical(before_ptx) == canonical(after_ptx)

        with ThreadPoolExecutor(jobs) as pool:
            outcome = list(pool.map(compare, variants))
    new = [v for v, s in zip(variants, outcome) if s is None]
    old = [(v, s) for v, s in zip(variants, outcome) if s is not None]
    variants = [v for v, _ in old]
    same = [s for _, s in old]
    differing = [v for v, s in zip(variants, same) if not s]
    for file, dtype, d, knobs, _ in differing:
        print(f"DIFFERS: {file} {dtype} D={d} {knobs}")
    if new:
        print(f"new (BEFORE's source refuses them, AFTER's compiles): {len(new)} variants, e.g. "
              f"{new[0][0]} {new[0][1]} D={new[0][2]} {new[0][3]}")
    by_file = {}
    for (file, *_), s in zip(variants, same):
        n_same, n = by_file.get(file, (0, 0))
        by_file[file] = (n_same + s, n + 1)
    for file, (n_same, n) in by_file.items():
        print(f"{file}: {n_same} of {n} variants byte-identical PTX")
    print(f"total: {sum(same)} of {len(variants)} byte-identical")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
