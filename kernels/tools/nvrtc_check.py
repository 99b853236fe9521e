#!/usr/bin/env python3
"""Compile-check a kernel without a GPU: NVRTC (via ctypes) -> PTX -> `ptxas -v`, one line per config.

For each config it prints registers, static+dynamic-free shared memory reported by ptxas, stack
frame, spill stores/loads, and fails (exit 1) if any config does not compile, or, with --strict,
spills or uses a stack frame.

Usage:
  nvrtc_check.py [--src kernels/mma.cu] [--cuda DIR] [--strict] [--keep DIR]
                 [--config "HEAD_DIM=128 NUM_WARPS=8 BLOCK_N=64 STAGES=2"] ...
                 [--dtypes f16,bf16] [--sweep] [--arch 90]

Without --config it checks the default config of each head dim (64 and 128) for each dtype. With
--sweep it checks every NUM_WARPS x WARP_M x KV_SPLIT x BLOCK_N x STAGES (2, 3) combination instead.
The CUDA directory (default: $CUDA_WHEEL_DIR or /tmp/wh/t/nvidia/cu13) must hold
lib/libnvrtc.so.13, bin/ptxas and include/.
"""

import argparse
import ctypes
import itertools
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_CUDA = os.environ.get("CUDA_WHEEL_DIR", "/tmp/wh/t/nvidia/cu13")
KERNELS_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The recommended defaults per head dim (what mma.cu's #ifndef defaults give).
DEFAULT_CONFIGS = {
    64: {"HEAD_DIM": 64, "NUM_WARPS": 4, "WARP_M": 32, "BLOCK_N": 96, "STAGES": 2},
    128: {"HEAD_DIM": 128, "NUM_WARPS": 4, "WARP_M": 32, "BLOCK_N": 48, "STAGES": 3},
}
DTYPE_DEFINES = {"f16": "ATTN_DTYPE_F16", "bf16": "ATTN_DTYPE_BF16"}


class Nvrtc:
    """Minimal ctypes binding of the NVRTC calls needed to turn a source string into PTX."""

    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, status, what, log=""):
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status).decode()
            raise RuntimeError(f"{what} failed: {msg}\n{log}")

    def compile_to_ptx(self, source, name, options):
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(
                ctypes.byref(prog), source.encode(), name.encode(), 0, None, None
            ),
            "nvrtcCreateProgram",
        )
        try:
            opts = [o.encode() for o in options]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            status = self.lib.nvrtcCompileProgram(prog, len(opts), arr)
            log = self._log(prog)
            self._check(status, "nvrtcCompileProgram", log)
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            buf = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            return buf.value.decode(), log
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog):
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(max(size.value, 1))
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace").strip()


def nvrtc_options(include_dir, arch, defines):
    """The NVRTC options the host uses: virtual arch, C++17, kernels/ and CUDA headers, -D defines."""
    opts = [
        f"--gpu-architecture=compute_{arch}",
        "-std=c++17",
        f"-I{KERNELS_DIR}",
        f"-I{include_dir}",
        "-default-device",
    ]
    opts += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in defines.items()]
    return opts


PTXAS_PATTERNS = {
    "regs": re.compile(r"Used (\d+) registers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_st": re.compile(r"(\d+) bytes spill stores"),
    "spill_ld": re.compile(r"(\d+) bytes spill loads"),
}


def ptxas_report(cuda_dir, arch, ptx, keep_dir, tag):
    """Assembles `ptx` for sm_<arch> and parses `ptxas -v` into a dict of ints."""
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = os.path.join(keep_dir or tmp, f"{tag}.ptx")
        with open(ptx_path, "w") as f:
            f.write(ptx)
        cubin = os.path.join(keep_dir or tmp, f"{tag}.cubin")
        res = subprocess.run(
            [os.path.join(cuda_dir, "bin", "ptxas"), f"-arch=sm_{arch}", "-v", ptx_path, "-o", cubin],
            capture_output=True,
            text=True,
        )
    out = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError(f"ptxas failed:\n{out}")
    report = {}
    for key, pat in PTXAS_PATTERNS.items():
        m = pat.search(out)
        report[key] = int(m.group(1)) if m else 0
    report["warnings"] = [l for l in out.splitlines() if "warning" in l.lower()]
    return report


def block_m(cfg):
    """mma.cu's BLOCK_M: WARP_M * NUM_WARPS / KV_SPLIT (with its per-head-dim defaults)."""
    d = cfg["HEAD_DIM"]
    return cfg.get("WARP_M", 32) * cfg.get("NUM_WARPS", 4) // cfg.get("KV_SPLIT", 1)


def dynamic_smem_bytes(cfg):
    """mma.cu's formula: Q tile + max(K/V ring, KV_SPLIT merge space)."""
    d, split = cfg["HEAD_DIM"], cfg.get("KV_SPLIT", 1)
    m = block_m(cfg)
    ring = 2 * cfg.get("STAGES", 3 if d == 128 else 2) * split * cfg.get("BLOCK_N", 48 if d == 128 else 96) * d * 2
    merge = (split - 1) * m * (4 * d + 32)
    return m * d * 2 + max(ring, merge)


def parse_config(text):
    cfg = {}
    for item in text.split():
        key, _, value = item.partition("=")
        cfg[key] = int(value) if value.lstrip("-").isdigit() else (value or None)
    if "HEAD_DIM" not in cfg:
        raise SystemExit(f"config {text!r} lacks HEAD_DIM")
    return cfg


def sweep_configs():
    for d, nw, wm, split, bn, st in itertools.product((64, 128), (1, 2, 4, 8), (16, 32), (1, 2, 4), (32, 64, 128), (2, 3)):
        if nw % split == 0:
            yield {"HEAD_DIM": d, "NUM_WARPS": nw, "WARP_M": wm, "KV_SPLIT": split, "BLOCK_N": bn, "STAGES": st}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(KERNELS_DIR, "mma.cu"))
    ap.add_argument("--cuda", default=DEFAULT_CUDA)
    ap.add_argument("--arch", default="90")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--strict", action="store_true", help="fail on spills or a non-zero stack frame")
    ap.add_argument("--keep", default=None, help="directory to keep the .ptx/.cubin files in")
    args = ap.parse_args()

    nvrtc = Nvrtc(os.path.join(args.cuda, "lib", "libnvrtc.so.13"))
    with open(args.src) as f:
        source = f.read()
    if args.config:
        configs = [parse_config(c) for c in args.config]
    elif args.sweep:
        configs = list(sweep_configs())
    else:
        configs = list(DEFAULT_CONFIGS.values())
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)

    failures = 0
    header = f"{'dtype':5} {'config':60} {'regs':>4} {'smem':>6} {'stack':>5} {'spill_st':>8} {'spill_ld':>8} {'dyn_smem':>8}"
    print(header)
    for cfg, dtype in itertools.product(configs, args.dtypes.split(",")):
        defines = {DTYPE_DEFINES[dtype]: None, **cfg}
        label = " ".join(f"{k}={v}" for k, v in cfg.items() if k != "HEAD_DIM")
        label = f"D={cfg['HEAD_DIM']} {label}"
        tag = f"{os.path.splitext(os.path.basename(args.src))[0]}_{dtype}_" + "_".join(
            f"{k}{v}" for k, v in cfg.items()
        )
        try:
            ptx, log = nvrtc.compile_to_ptx(source, os.path.basename(args.src), nvrtc_options(os.path.join(args.cuda, 'include'), args.arch, defines))
            rep = ptxas_report(args.cuda, args.arch, ptx, args.keep, tag)
        except RuntimeError as e:
            failures += 1
            print(f"{dtype:5} {label:60} FAILED\n{e}")
            continue
        dyn = dynamic_smem_bytes(cfg) if all(k in cfg for k in ("NUM_WARPS", "BLOCK_N", "STAGES")) else -1
        bad = rep["spill_st"] or rep["spill_ld"] or rep["stack"]
        flag = "  <-- spills/stack" if bad else ""
        print(
            f"{dtype:5} {label:60} {rep['regs']:>4} {rep['smem']:>6} {rep['stack']:>5} "
            f"{rep['spill_st']:>8} {rep['spill_ld']:>8} {dyn:>8}{flag}"
        )
        for w in rep["warnings"] + ([log] if log else []):
            print(f"      {w}")
        if args.strict and bad:
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
