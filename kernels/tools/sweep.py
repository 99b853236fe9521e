#!/usr/bin/env python3
"""Time many mma.cu configs against PyTorch SDPA in one process (needs a GPU, PyTorch and CuPy).

The protocol follows `cargo xtask gate`'s graph mode: before each sample the L2 is flushed (a
write over a buffer larger than it), then one launch replayed from a CUDA graph is timed with CUDA
events, so that neither host launch overhead nor a warm L2 is in the numbers. Each config is first
checked against SDPA's output on the same inputs (max abs error), so a fast but wrong config shows.

Usage:
  sweep.py --shape 1,8,512,64 [--shape B,H,S,D[,causal]] --config "NUM_WARPS=4 KV_SPLIT=4 ..." ...
           [--samples 50] [--dtype f16] [--backends default,flash] [--seed N]

HEAD_DIM comes from each shape; a config line holds the other defines. Prints one line per
(shape, config): median µs, TFLOP/s (4·B·H·S²·D, halved when causal) and speedup vs each backend.
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check import TORCH_DTYPES, Kernel, find_cuda  # noqa: E402
from nvrtc_check import KERNELS_DIR, Nvrtc, parse_config  # noqa: E402

FLUSH_BYTES = 256 << 20  # well above the H100's 50 MB L2


def time_graph(fn, samples, flush):
    """Median µs of one launch of `fn`, replayed from a CUDA graph after an L2 flush each time."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up outside capture (also lets SDPA pick its kernels)
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(samples + 5):
        flush.zero_()
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", required=True, help="B,H,S,D or B,H,S,D,causal")
    ap.add_argument("--config", action="append", required=True, help='defines except HEAD_DIM, e.g. "NUM_WARPS=4"')
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--dtype", default="f16", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--backends", default="default,flash")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    lib, inc = find_cuda()
    nvrtc = Nvrtc(lib)
    major, minor = torch.cuda.get_device_capability()
    with open(os.path.join(KERNELS_DIR, "mma.cu")) as f:
        source = f.read()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    dt = TORCH_DTYPES[args.dtype]
    backends = {
        "default": None,
        "flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
        "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
        "efficient": torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION,
    }
    print(f"device {torch.cuda.get_device_name()}, seed {args.seed}, {args.samples} samples, dtype {args.dtype}")
    for text in args.shape:
        parts = [int(x) for x in text.split(",")]
        b, h, s, d = parts[:4]
        causal = bool(parts[4]) if len(parts) > 4 else False
        q, k, v = (torch.randn(b, h, s, d, generator=gen, device="cuda").to(dt) for _ in range(3))
        o = torch.empty_like(q)
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        scale = 1.0 / math.sqrt(d)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        base = {}
        for name in [x for x in args.backends.split(",") if x]:
            def sdpa(name=name):
                if backends[name] is None:
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                with torch.nn.attention.sdpa_kernel(backends[name]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            base[name] = time_graph(sdpa, args.samples, flush)
        head = " ".join(f"{n} {us:.1f}µs {flops / us / 1e6:.0f}TF" for n, us in base.items())
        print(f"\n# {b},{h},{s},{d} causal={int(causal)}: {head}", flush=True)
        for cfg_text in args.config:
            cfg = {"HEAD_DIM": d, **parse_config(f"HEAD_DIM={d} {cfg_text}")}
            try:
                kern = Kernel(nvrtc, inc, f"{major}{minor}", cfg, args.dtype, source)
                o.zero_()
                kern.launch(q, k, v, o, scale, int(causal))
                torch.cuda.synchronize()
                err = (o.float() - ref.float()).abs().max().item()
                us = time_graph(lambda: kern.launch(q, k, v, o, scale, int(causal)), args.samples, flush)
            except Exception as e:  # noqa: BLE001 - one bad config must not end the sweep
                print(f"  {cfg_text:55} ERROR {str(e).splitlines()[0]}", flush=True)
                continue
            vs = " ".join(f"x{base_us / us:.3f} vs {n}" for n, base_us in base.items())
            print(f"  {cfg_text:55} {us:8.1f}µs {flops / us / 1e6:5.0f}TF  err {err:.1e}  {vs}", flush=True)


if __name__ == "__main__":
    main()
