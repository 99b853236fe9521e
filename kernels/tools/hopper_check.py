#!/usr/bin/env python3
"""Compile-check kernels/hopper.cu without a GPU: NVRTC for compute_90a, then `ptxas -arch=sm_90a -v`.

Prints one line per (config, dtype): registers, stack frame, spill bytes, and the dynamic shared
memory of hopper.cu's formula; exits 1 if a config fails to compile, spills, uses a stack frame,
needs more shared memory than sm_90 allows, or ptxas warns (e.g. wgmma serialisation).

Usage: hopper_check.py [--cuda DIR] [--keep DIR] [--config "HEAD_DIM=128 NUM_WARPS=8 ..."] ...
Without --config it checks every NUM_WARPS x BLOCK_N x STAGES x OVERLAP x PINGPONG combination of both head dims that
fits in shared memory.
"""

import argparse
import ctypes
import itertools
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_check as nc  # noqa: E402  (the NVRTC binding and ptxas parsing)

SRC = os.path.join(nc.KERNELS_DIR, "hopper.cu")
ARCH = "90a"
SMEM_OPTIN_LIMIT = 232448


def shared_bytes(cfg):
    """hopper.cu's formula: alignment slack + Q tile + STAGES x (K tile + V tile)."""
    d = cfg["HEAD_DIM"]
    block_m = 16 * cfg.get("NUM_WARPS", 8)
    return 1024 + block_m * d * 2 + cfg.get("STAGES", 3) * 2 * cfg.get("BLOCK_N", 128) * d * 2


def ptxas_report(cuda_dir, ptx, keep_dir, tag):
    """nvrtc_check's ptxas report, plus ptxas's "Potential Performance Loss" infos (C75xx: wgmma
    serialised, i.e. no overlap between wgmma groups), which are not warnings and say why."""
    rep = nc.ptxas_report(cuda_dir, ARCH, ptx, keep_dir, tag)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        res = subprocess.run(
            [os.path.join(cuda_dir, "bin", "ptxas"), f"-arch=sm_{ARCH}", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
        )
    rep["serialised"] = [l for l in (res.stdout + res.stderr).splitlines() if "Performance Loss" in l]
    return rep


def all_configs():
    for d, warps, block_n, stages, overlap, pingpong in itertools.product(
        (64, 128), (4, 8, 12), (64, 128), (2, 3, 4), (0, 1), (0, 1)
    ):
        cfg = {"HEAD_DIM": d, "NUM_WARPS": warps, "BLOCK_N": block_n, "STAGES": stages, "OVERLAP": overlap,
               "PINGPONG": pingpong}
        if pingpong and (warps < 8 or not overlap):
            continue
        if warps == 12 and d != 64:
            continue
        if shared_bytes(cfg) <= SMEM_OPTIN_LIMIT:
            yield cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda", default=nc.DEFAULT_CUDA)
    ap.add_argument("--keep", default=None, help="directory to keep the .ptx/.cubin files in")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--allow-serialised", action="store_true", help="do not fail on ptxas's wgmma serialisation notes")
    args = ap.parse_args()

    # NVRTC dlopens its builtins by name: load them first so that no LD_LIBRARY_PATH is needed.
    builtins = os.path.join(args.cuda, "lib", "libnvrtc-builtins.so.13.0")
    if os.path.exists(builtins):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = nc.Nvrtc(os.path.join(args.cuda, "lib", "libnvrtc.so.13"))
    with open(SRC) as f:
        source = f.read()
    configs = [nc.parse_config(c) for c in args.config] or list(all_configs())
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)

    failures = 0
    print(f"{'dtype':5} {'config':40} {'regs':>4} {'stack':>5} {'spill_st':>8} {'spill_ld':>8} {'shared':>7}")
    for cfg, dtype in itertools.product(configs, args.dtypes.split(",")):
        label = " ".join(f"{k}={v}" for k, v in cfg.items())
        tag = f"hopper_{dtype}_" + "_".join(f"{k}{v}" for k, v in cfg.items())
        defines = {nc.DTYPE_DEFINES[dtype]: None, **cfg}
        try:
            opts = nc.nvrtc_options(os.path.join(args.cuda, "include"), ARCH, defines)
            ptx, log = lib.compile_to_ptx(source, "hopper.cu", opts)
            rep = ptxas_report(args.cuda, ptx, args.keep, tag)
        except RuntimeError as e:
            failures += 1
            print(f"{dtype:5} {label:40} FAILED\n{e}")
            continue
        shared = shared_bytes(cfg)
        bad = rep["spill_st"] or rep["spill_ld"] or rep["stack"] or rep["warnings"] or shared > SMEM_OPTIN_LIMIT
        bad = bad or (rep["serialised"] and not args.allow_serialised)
        print(
            f"{dtype:5} {label:40} {rep['regs']:>4} {rep['stack']:>5} {rep['spill_st']:>8} "
            f"{rep['spill_ld']:>8} {shared:>7}{'  <-- BAD' if bad else ''}"
        )
        for w in rep["warnings"] + rep["serialised"] + ([log] if log else []):
            print(f"      {w}")
        failures += bool(bad)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
