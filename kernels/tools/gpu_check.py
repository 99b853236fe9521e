#!/usr/bin/env python3
"""GPU check of kernels/mma.cu (needs a CUDA GPU, PyTorch and CuPy): correctness against a float64
oracle over many shapes and configs, then optional timings against PyTorch's SDPA.

The kernel is compiled the way the host crate does it: NVRTC (ctypes, see nvrtc_check.py) with
-D defines, for the device's own architecture; the PTX is loaded with CuPy and launched with
grid = (ceil(S_q / BLOCK_M), H, B), block = NUM_WARPS * 32 and mma.cu's dynamic shared memory
(BLOCK_M and the formula from nvrtc_check.py).

Usage:
  gpu_check.py [--sweep] [--bench] [--seed N] [--cuda-lib PATH] [--cuda-include DIR]

Checks per case: every output element finite and within tolerance of the oracle (rows that see no
key must be exactly 0), and a guard zone after the output untouched (no write past row S_q - 1).
"""

import argparse
import glob
import itertools
import math
import os
import sys
import tempfile

import cupy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvrtc_check import DEFAULT_CONFIGS, DTYPE_DEFINES, KERNELS_DIR, Nvrtc, block_m, dynamic_smem_bytes, nvrtc_options, parse_config  # noqa: E402

TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
# Max |kernel - oracle| allowed; outputs are O(1) with randn inputs. P is rounded to the operand
# type before P·V, so the bound is a few ulps of the operand type.
TOLERANCE = {"f16": 4e-3, "bf16": 3e-2}
GUARD_ELEMS = 4096
SENTINEL = 1024.0  # exact in f16 and bf16

# (B, H, S_q, S_kv) shapes, run both non-causal and causal.
SHAPES = [
    (1, 1, 1, 1),
    (1, 1, 1, 7),
    (1, 1, 7, 1),  # causal: rows 0..5 see no key
    (1, 2, 17, 33),
    (1, 2, 33, 17),
    (2, 3, 100, 37),
    (1, 1, 128, 128),
    (1, 2, 200, 333),
    (1, 1, 197, 129),
    (2, 2, 1000, 1000),
    (1, 3, 515, 1031),
]


def find_cuda():
    """Returns (libnvrtc path, include dir) on the device machine."""
    candidates = []
    for root in ("/usr/local/cuda", os.environ.get("CUDA_HOME", "")):
        if root:
            libs = glob.glob(f"{root}/lib64/libnvrtc.so*") + glob.glob(f"{root}/targets/*/lib/libnvrtc.so*")
            candidates.append((libs, f"{root}/include"))
    try:
        import nvidia.cu13 as cu13  # the pip wheels' layout

        root = list(cu13.__path__)[0]  # a namespace package: no __file__
        candidates.append((glob.glob(f"{root}/lib/libnvrtc.so*"), f"{root}/include"))
    except ImportError:
        pass
    for libs, inc in candidates:
        libs = [l for l in libs if "builtins" not in l and "alt" not in l]
        if libs and os.path.exists(os.path.join(inc, "cuda_fp16.h")):
            return sorted(libs)[-1], inc
    raise SystemExit("could not find libnvrtc and CUDA headers; pass --cuda-lib/--cuda-include")


class Kernel:
    """One compiled config of mma.cu."""

    def __init__(self, nvrtc, include_dir, arch, cfg, dtype, source):
        self.cfg, self.dtype = cfg, dtype
        opts = nvrtc_options(include_dir, arch, {DTYPE_DEFINES[dtype]: None, **cfg})
        ptx, _ = nvrtc.compile_to_ptx(source, "mma.cu", opts)
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
            path = f.name
        self.module = cupy.RawModule(path=path)
        self.fn = self.module.get_function("attn_fwd")  # loads the module (lazily, from `path`)
        os.unlink(path)
        self.smem = dynamic_smem_bytes(cfg)
        self.fn.max_dynamic_shared_size_bytes = self.smem
        self.block_m = block_m(cfg)

    def launch(self, q, k, v, o, scale, causal):
        b, h, sq, _ = q.shape
        skv = k.shape[2]
        grid = ((sq + self.block_m - 1) // self.block_m, h, b)
        args = tuple(cupy.uint64(t.data_ptr()) for t in (q, k, v, o)) + (
            cupy.int32(b), cupy.int32(h), cupy.int32(sq), cupy.int32(skv), cupy.float32(scale), cupy.int32(causal),
        )
        # On PyTorch's current stream, so that the launch can be captured in a torch CUDA graph.
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.fn(grid, (self.cfg.get("NUM_WARPS", 4) * 32,), args, shared_mem=self.smem)


def oracle(q, k, v, scale, causal):
    """float64 reference with the ABI's bottom-right causal mask; rows that see no key are 0."""
    q, k, v = (t.double() for t in (q, k, v))
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    sq, skv = s.shape[-2], s.shape[-1]
    if causal:
        i = torch.arange(sq, device=s.device)[:, None]
        j = torch.arange(skv, device=s.device)[None, :]
        s = s.masked_fill(j > i + skv - sq, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    return torch.matmul(p, v) / torch.where(l > 0, l, torch.ones_like(l))


def check_case(kernel, shape, causal, gen):
    b, h, sq, skv = shape
    d = kernel.cfg["HEAD_DIM"]
    dt = TORCH_DTYPES[kernel.dtype]
    q = torch.randn(b, h, sq, d, generator=gen, device="cuda").to(dt)
    k = torch.randn(b, h, skv, d, generator=gen, device="cuda").to(dt)
    v = torch.randn(b, h, skv, d, generator=gen, device="cuda").to(dt)
    scale = 1.0 / math.sqrt(d)
    n = b * h * sq * d
    buf = torch.full((n + GUARD_ELEMS,), SENTINEL, dtype=dt, device="cuda")
    o = buf[:n].view(b, h, sq, d)
    kernel.launch(q, k, v, o, scale, causal)
    torch.cuda.synchronize()
    ref = oracle(q, k, v, scale, causal)
    problems = []
    if not torch.all(buf[n:] == SENTINEL):
        problems.append("wrote past the output")
    if not torch.isfinite(o).all():
        problems.append(f"{int((~torch.isfinite(o)).sum())} non-finite outputs")
    err = (o.double() - ref).abs().max().item()
    if err > TOLERANCE[kernel.dtype]:
        problems.append(f"max abs err {err:.3e}")
    if causal and sq > skv:  # rows i < sq - skv see no key: must be exactly zero
        dead = o[:, :, : sq - skv].double()
        if dead.abs().max().item() != 0:
            problems.append("fully masked rows not zero")
    return err, problems


def bench(fn, iters=20, warmup=5):
    """Median ms per call over `iters` samples; each sample times enough back-to-back calls to fill
    about 1 ms, so that launch overhead on the host does not leak into short kernels' times."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(reps):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps

    reps = max(1, min(200, math.ceil(1.0 / max(sample(1), 1e-3))))
    times = sorted(sample(reps) for _ in range(iters))
    return times[len(times) // 2]


def run_bench(kernels, shapes, gen):
    print("\n# timings (median of 20 samples, ms per call; TFLOP/s counts 4·B·H·Sq·Skv·D, halved when causal)")
    for (b, h, s, d), causal, dtype in shapes:
        dt = TORCH_DTYPES[dtype]
        q, k, v = (torch.randn(b, h, s, d, generator=gen, device="cuda").to(dt) for _ in range(3))
        o = torch.empty_like(q)
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        scale = 1.0 / math.sqrt(d)
        ms_sdpa = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
        line = f"B={b} H={h} S={s} D={d} {dtype} causal={causal}: sdpa {ms_sdpa:.3f} ms {flops / ms_sdpa / 1e9:.0f} TF/s"
        for kern in kernels:
            if kern.cfg["HEAD_DIM"] != d or kern.dtype != dtype:
                continue
            ms = bench(lambda: kern.launch(q, k, v, o, scale, causal))
            tag = "/".join(str(kern.cfg[x]) for x in ("NUM_WARPS", "BLOCK_N", "STAGES"))
            extra = "".join(f" {k_}={v_}" for k_, v_ in kern.cfg.items() if k_ not in ("HEAD_DIM", "NUM_WARPS", "BLOCK_N", "STAGES"))
            line += f"\n    mma w/n/s={tag}{extra}: {ms:.3f} ms {flops / ms / 1e9:.0f} TF/s"
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="check every NUM_WARPS x BLOCK_N x STAGES config")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true")
    ap.add_argument("--config", action="append", default=[], help='e.g. "HEAD_DIM=128 NUM_WARPS=8 BLOCK_N=64 STAGES=2"')
    ap.add_argument("--extra", action="append", default=[], help="extra defines for every config, K=V")
    ap.add_argument("--max-seq", type=int, default=None, help="skip shapes with S_q or S_kv above this (for sanitizers)")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--cuda-lib")
    ap.add_argument("--cuda-include")
    args = ap.parse_args()

    lib, inc = (args.cuda_lib, args.cuda_include) if args.cuda_lib else find_cuda()
    nvrtc = Nvrtc(lib)
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    with open(os.path.join(KERNELS_DIR, "mma.cu")) as f:
        source = f.read()
    print(f"device {torch.cuda.get_device_name()} sm_{arch}, nvrtc {lib}, seed {args.seed}")

    extra = dict(e.split("=", 1) for e in args.extra)
    if args.config:
        configs = [{**parse_config(c), **extra} for c in args.config]
    elif args.sweep:
        configs = [
            {"HEAD_DIM": d, "NUM_WARPS": nw, "BLOCK_N": bn, "STAGES": st, **extra}
            for d, nw, bn, st in itertools.product((64, 128), (4, 8), (32, 64, 128), (1, 2, 3))
        ]
    else:
        configs = [{**c, **extra} for c in DEFAULT_CONFIGS.values()]

    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    failures = 0
    kernels = []
    for cfg, dtype in itertools.product(configs, ("f16", "bf16")):
        kern = Kernel(nvrtc, inc, arch, cfg, dtype, source)
        kernels.append(kern)
        if args.bench_only:
            continue
        worst = 0.0
        bad = []
        shapes = [sh for sh in SHAPES if args.max_seq is None or max(sh[2], sh[3]) <= args.max_seq]
        for shape, causal in itertools.product(shapes, (0, 1)):
            err, problems = check_case(kern, shape, causal, gen)
            worst = max(worst, err)
            if problems:
                bad.append(f"{shape} causal={causal}: {', '.join(problems)}")
        failures += bool(bad)
        print(f"{dtype:4} {cfg}: {'FAIL' if bad else 'ok'} (worst err {worst:.2e})", flush=True)
        for b in bad:
            print(f"    {b}")

    if args.bench or args.bench_only:
        shapes = [
            ((2, 16, 8192, 128), 0, "f16"),
            ((2, 16, 8192, 128), 1, "f16"),
            ((2, 16, 8192, 128), 0, "bf16"),
            ((1, 8, 512, 64), 0, "f16"),
            ((1, 8, 512, 64), 1, "f16"),
            ((4, 16, 2048, 64), 0, "f16"),
        ]
        run_bench(kernels, shapes, gen)
    print("FAILURES" if failures else "ALL OK")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
