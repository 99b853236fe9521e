#!/usr/bin/env python3
"""Compile-check kernels/hopper.cu without a GPU: NVRTC for compute_90a, then `ptxas -arch=sm_90a -v`.

The configs and their dynamic shared memory come from the registry, the one source of hopper's
knob domains, constraints, shared-memory formula and the H100's limit: `cargo xtask kernels
--configs hopper` lists every valid config with its SHARED_BYTES (a config over the limit is not
valid, so it is not listed).

Prints one line per (config, dtype): registers, stack frame, spill bytes, and the dynamic shared
memory; exits 1 if a config fails to compile, spills, uses a stack frame, or ptxas warns (e.g.
wgmma serialisation).

Usage: hopper_check.py [--cuda DIR (default $CUDA_HOME, else target/cuda-wheels/nvidia/cu13)] [--keep DIR] [--config "HEAD_DIM=128 NUM_WARPS=8 ..."] ... [--rev REV]
Without --config it checks every valid config of both head dims; each --config keeps those whose
knobs match all of its KEY=VALUE pairs. --rev REV compiles the kernels folder of git revision REV
(git archive) instead of this checkout's, with this checkout's configs and NVRTC flags: its kept
PTX and cubins beside this checkout's show what a change did to a config (`cmp`, nvdisasm).
"""

import argparse
import ctypes
import glob
import itertools
import os
import re
import subprocess
import sys
import tempfile

KERNELS_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# $CUDA_HOME, else the wheels `cargo xtask test` installs into this checkout's target/.
DEFAULT_CUDA = os.environ.get("CUDA_HOME") or os.path.join(KERNELS_DIR, "..", "target", "cuda-wheels", "nvidia", "cu13")
DTYPE_DEFINES = {"f16": "ATTN_DTYPE_F16", "bf16": "ATTN_DTYPE_BF16"}
ARCH = "90a"


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


def xtask_lines(*args):
    """What `cargo xtask ARGS...` prints, line by line (the registry's answers: configs, flags)."""
    res = subprocess.run(
        ["cargo", "xtask", *args],
        cwd=os.path.dirname(KERNELS_DIR),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise SystemExit(f"cargo xtask {' '.join(args)} failed:\n{res.stderr}")
    return res.stdout.splitlines()


def host_flags():
    """NVRTC's flags for every kernel as the host passes them (`cargo xtask kernels --nvrtc-flags`:
    the language standard and the like), so that a kernel this accepts is one the host accepts."""
    return xtask_lines("kernels", "--nvrtc-flags")


def nvrtc_options(include_dir, arch, defines, flags, kernels_dir=KERNELS_DIR):
    """The NVRTC options the host uses: virtual arch, its flags (host_flags), kernels/ and CUDA
    headers, -D defines."""
    opts = [f"--gpu-architecture=compute_{arch}", *flags, f"-I{kernels_dir}", f"-I{include_dir}"]
    opts += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in defines.items()]
    return opts


PTXAS_PATTERNS = {
    "regs": re.compile(r"Used (\d+) registers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_st": re.compile(r"(\d+) bytes spill stores"),
    "spill_ld": re.compile(r"(\d+) bytes spill loads"),
}


def ptxas_verbose(cuda_dir, arch, ptx, keep_dir, tag):
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


def parse_config(text):
    """`KEY=VALUE KEY=VALUE ...` as a dict of ints."""
    cfg = {}
    for item in text.split():
        key, _, value = item.partition("=")
        cfg[key] = int(value)
    return cfg


def registry_configs():
    """Every valid hopper config (HEAD_DIM and the knobs) with its SHARED_BYTES, from the registry."""
    return [parse_config(line) for line in xtask_lines("kernels", "--configs", "hopper") if line.startswith("HEAD_DIM=")]


def ptxas_report(cuda_dir, ptx, keep_dir, tag):
    """nvrtc_check's ptxas report, plus ptxas's "Potential Performance Loss" infos (C75xx: wgmma
    serialised, i.e. no overlap between wgmma groups), which are not warnings and say why."""
    rep = ptxas_verbose(cuda_dir, ARCH, ptx, keep_dir, tag)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda", default=DEFAULT_CUDA)
    ap.add_argument("--keep", default=None, help="directory to keep the .ptx/.cubin files in")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--allow-serialised", action="store_true", help="do not fail on ptxas's wgmma serialisation notes")
    ap.add_argument("--rev", default=None, help="compile the kernels of this git revision instead of the checkout's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        return check_configs(args, kernels_at(args.rev, tmp))


def kernels_at(rev, into):
    """The kernels folder of git revision `rev`, extracted under `into` (None: this checkout's)."""
    if rev is None:
        return KERNELS_DIR
    root = os.path.dirname(KERNELS_DIR)
    archive = subprocess.run(["git", "archive", rev, "kernels"], cwd=root, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {rev} kernels failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return os.path.join(into, "kernels")


def check_configs(args, kernels_dir):
    """Compiles and checks every config `args` selects from the kernels in `kernels_dir`."""

    # NVRTC dlopens its builtins by name: load them first so that no LD_LIBRARY_PATH is needed.
    for builtins in glob.glob(os.path.join(args.cuda, "lib*", "libnvrtc-builtins.so.*")):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
        break
    found = sorted(glob.glob(os.path.join(args.cuda, "lib*", "libnvrtc.so*")))
    if not found:
        raise SystemExit(f"no libnvrtc.so under {args.cuda}/lib*: pass --cuda DIR or set CUDA_HOME")
    lib = Nvrtc(found[0])
    with open(os.path.join(kernels_dir, "hopper.cu")) as f:
        source = f.read()
    configs = registry_configs()
    flags = host_flags()
    if args.config:
        wanted = [parse_config(c) for c in args.config]
        configs = [c for c in configs if any(all(c.get(k) == v for k, v in w.items()) for w in wanted)]
        if not configs:
            raise SystemExit(f"no valid hopper config matches {args.config} (cargo xtask kernels --configs hopper)")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)

    failures = 0
    print(f"{'dtype':5} {'config':64} {'regs':>4} {'stack':>5} {'spill_st':>8} {'spill_ld':>8} {'shared':>7}")
    for entry, dtype in itertools.product(configs, args.dtypes.split(",")):
        cfg = {k: v for k, v in entry.items() if k != "SHARED_BYTES"}
        label = " ".join(f"{k}={v}" for k, v in cfg.items() if k != "BLOCK_M")  # BLOCK_M = 16 · NUM_WARPS
        tag = f"hopper_{dtype}_" + "_".join(f"{k}{v}" for k, v in cfg.items())
        defines = {DTYPE_DEFINES[dtype]: None, **cfg}
        try:
            opts = nvrtc_options(os.path.join(args.cuda, "include"), ARCH, defines, flags, kernels_dir)
            ptx, log = lib.compile_to_ptx(source, "hopper.cu", opts)
            rep = ptxas_report(args.cuda, ptx, args.keep, tag)
        except RuntimeError as e:
            failures += 1
            print(f"{dtype:5} {label:64} FAILED\n{e}")
            continue
        shared = entry["SHARED_BYTES"]
        bad = rep["spill_st"] or rep["spill_ld"] or rep["stack"] or rep["warnings"]
        bad = bad or (rep["serialised"] and not args.allow_serialised)
        print(
            f"{dtype:5} {label:64} {rep['regs']:>4} {rep['stack']:>5} {rep['spill_st']:>8} "
            f"{rep['spill_ld']:>8} {shared:>7}{'  <-- BAD' if bad else ''}"
        )
        for w in rep["warnings"] + rep["serialised"] + ([log] if log else []):
            print(f"      {w}")
        failures += bool(bad)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
