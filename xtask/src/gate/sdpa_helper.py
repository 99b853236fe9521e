"""attn's PyTorch SDPA helper: measures torch.nn.functional.scaled_dot_product_attention with the
same protocol as attn's own timing harness, and computes SDPA's output on given inputs.

Usage: python3 sdpa_helper.py JOBS.json RESULTS.json
JOBS.json: {"jobs": [job, ...]} where a job is
  {"kind": "info"}
  {"kind": "run", "q": path, "k": path, "v": path, "out": path, "dtype": "fp16"|"bf16",
   "causal": bool, "scale": float, "backend": "default"|"flash"|"efficient"|"cudnn"|"math"}
  {"kind": "time", "shape": [B, H, Sq, Skv, D], "dtype": ..., "causal": bool, "scale": float,
   "backend": ..., "warmup": int, "samples": int, "mode": "graph"|"flushed"|"batch",
   "batch_launches": int, "guard_launches": int, "sets": int, "seed": int, "flush_bytes": int}
RESULTS.json: {"results": [result or {"error": "one line"}, ...]} in job order.
bf16 .npy files hold uint16 bit patterns (attn-oracle's convention).
"""
import json
import sys
import time


def main():
    jobs_path, results_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)["jobs"]
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # noqa: BLE001 - reported to the caller as one line
        write(results_path, {"fatal": f"PyTorch is not importable: {exc}"})
        return
    if not torch.cuda.is_available():
        write(results_path, {"fatal": "PyTorch sees no CUDA GPU"})
        return
    dev = torch.device("cuda")
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}

    def backend_ctx(name):
        import contextlib
        if name == "default":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        table = {
            "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
            "math": SDPBackend.MATH,
        }
        return sdpa_kernel([table[name]])

    def load(path, dtype):
        arr = np.load(path)
        t = torch.from_numpy(arr.astype(np.uint16) if dtype == "bf16" and arr.dtype != np.uint16 else arr)
        if dtype == "bf16":
            t = t.view(torch.bfloat16)
        return t.to(dev)

    def sdpa(q, k, v, job):
        # Bottom-right causal alignment for Sq != Skv, as attn's ABI defines it.
        sq, skv = q.shape[2], k.shape[2]
        if job["causal"] and sq != skv:
            from torch.nn.attention.bias import causal_lower_right
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(sq, skv), scale=job["scale"])
        return F.scaled_dot_product_attention(q, k, v, is_causal=job["causal"], scale=job["scale"])

    results = []
    for job in jobs:
        try:
            if job["kind"] == "info":
                props = torch.cuda.get_device_properties(dev)
                results.append({
                    "torch": torch.__version__,
                    "cuda": torch.version.cuda,
                    "cudnn": str(torch.backends.cudnn.version()),
                    "gpu": props.name,
                    "l2_bytes": getattr(props, "L2_cache_size", 0),
                })
            elif job["kind"] == "run":
                q, k, v = (load(job[x], job["dtype"]) for x in ("q", "k", "v"))
                with backend_ctx(job["backend"]):
                    o = sdpa(q, k, v, job)
                torch.cuda.synchronize()
                if job["dtype"] == "bf16":
                    arr = o.view(torch.int16).cpu().numpy().view(np.uint16)
                else:
                    arr = o.cpu().numpy()
                np.save(job["out"], arr)
                results.append({"out": job["out"]})
            elif job["kind"] == "time":
                results.append(time_job(job, torch, dtypes, dev, backend_ctx, sdpa))
            else:
                results.append({"error": f"unknown job kind {job['kind']}"})
        except Exception as exc:  # noqa: BLE001 - one line per failed job
            results.append({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
    write(results_path, {"results": results})


def time_job(job, torch, dtypes, dev, backend_ctx, sdpa):
    b, h, sq, skv, d = job["shape"]
    dtype = dtypes[job["dtype"]]
    gen = torch.Generator(device=dev)
    gen.manual_seed(job["seed"])
    sets = []
    for _ in range(max(1, job["sets"])):
        q = torch.randn((b, h, sq, d), generator=gen, device=dev, dtype=torch.float32).to(dtype)
        k = torch.randn((b, h, skv, d), generator=gen, device=dev, dtype=torch.float32).to(dtype)
        v = torch.randn((b, h, skv, d), generator=gen, device=dev, dtype=torch.float32).to(dtype)
        sets.append((q, k, v))
    flush = torch.empty(job["flush_bytes"], dtype=torch.uint8, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_sample = job["batch_launches"] if job["mode"] == "batch" else 1
    counter = [0]

    def launch():
        counter[0] += 1
        q, k, v = sets[counter[0] % len(sets)]
        return sdpa(q, k, v, job)

    samples, wall, guard_events = [], [], []
    with backend_ctx(job["backend"]), torch.no_grad():
        timed = launch
        if job["mode"] == "graph":
            # One graph per input set, captured after a warm-up on a side stream (PyTorch's recipe),
            # so that replays time the kernels and not Python's dispatch.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    launch()
            torch.cuda.current_stream().wait_stream(side)
            graphs = []
            for q, k, v in sets:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    sdpa(q, k, v, job)
                graphs.append(g)

            def timed():
                counter[0] += 1
                graphs[counter[0] % len(graphs)].replay()

        for _ in range(job["warmup"]):
            timed()
        torch.cuda.synchronize()
        for i in range(job["samples"]):
            if job["mode"] != "batch":
                flush.fill_(i % 251)
            start.record()
            for _ in range(per_sample):
                timed()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / per_sample)
        torch.cuda.synchronize()
        for _ in range(job["guard_launches"]):
            t0 = time.perf_counter()
            start.record()
            launch()
            end.record()
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1e6)
            guard_events.append(start.elapsed_time(end) * 1000.0)
    return {"samples_us": samples, "wall_us": wall, "guard_event_us": guard_events, "launches_per_sample": per_sample}


def write(path, obj):
    import os
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
