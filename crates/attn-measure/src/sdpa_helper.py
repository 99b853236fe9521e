"""attn's PyTorch SDPA helper: a long-lived process that times
torch.nn.functional.scaled_dot_product_attention with the same protocol as attn's own timing
harness, and computes SDPA's output on given inputs.

Usage: python3 sdpa_helper.py   (requests on stdin, replies on stdout, one JSON object a line)
Requests (attn-measure's `sdpa::Request`):
  {"kind": "info"}
  {"kind": "run", "q": path, "k": path, "v": path, "out": path, "dtype": "fp16"|"bf16",
   "causal": bool, "window": [left, right] (-1 unbounded), "scale": float,
   "backend": "default"|"flash"|"efficient"|"cudnn"|"math"}
  {"kind": "time", "shape": [B, H, Sq, Skv, D], "kv_heads": int, "dtype": ..., "causal": bool,
   "window": [left, right], "scale": float,
   "backend": ..., "warmup": int, "samples": int, "mode": "graph"|"flushed"|"batch",
   "batch_launches": int, "guard_launches": int, "sets": int, "seed": int, "flush_bytes": int}
Replies: {"ok": {...}} or {"error": "one line"}. A reply {"fatal": "..."} to the first request
means PyTorch cannot be used at all. bf16 .npy files hold uint16 bit patterns (attn-oracle's
convention). Repeated "time" requests for the same problem reuse its inputs and CUDA graphs, so
that the caller can interleave short blocks of samples with its own.
"""
import json
import sys
import time

PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # nothing but replies may reach the protocol stream


def reply(obj):
    PROTOCOL.write(json.dumps(obj) + "\n")
    PROTOCOL.flush()


def main():
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # noqa: BLE001 - reported to the caller as one line
        reply({"fatal": f"PyTorch is not importable: {exc}"})
        return
    if not torch.cuda.is_available():
        reply({"fatal": "PyTorch sees no CUDA GPU"})
        return
    state = Helper(torch, F, np)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            reply({"ok": state.handle(request)})
        except Exception as exc:  # noqa: BLE001 - one line per failed request
            text = str(exc).splitlines()[0] if str(exc) else ""
            reply({"error": f"{type(exc).__name__}: {text}"})


class Helper:
    def __init__(self, torch, F, np):
        self.torch, self.F, self.np = torch, F, np
        self.dev = torch.device("cuda")
        self.dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
        self.timing_key, self.timing_state = None, None

    def handle(self, request):
        kind = request["kind"]
        if kind == "info":
            torch = self.torch
            props = torch.cuda.get_device_properties(self.dev)
            return {"torch": torch.__version__, "cuda": torch.version.cuda or "",
                    "cudnn": str(torch.backends.cudnn.version()), "gpu": props.name}
        if kind == "run":
            return self.run(request)
        if kind == "time":
            return self.time(request)
        raise ValueError(f"unknown request kind {kind}")

    def backend(self, name):
        import contextlib
        if name == "default":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        table = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
        return sdpa_kernel([table[name]])

    def sdpa(self, q, k, v, job):
        # Grouped-query heads through SDPA's own GQA path; K/V carry fewer heads than Q.
        gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        sq, skv = q.shape[2], k.shape[2]
        left, right = job.get("window", [-1, -1])
        if left >= 0 or right >= 0:
            # SDPA has no sliding-window kernel: the window as a boolean mask (FlashAttention's
            # definition, bottom-right aligned), which only the mask-capable backends run.
            torch = self.torch
            i = torch.arange(sq, device=self.dev)[:, None] + (skv - sq)
            j = torch.arange(skv, device=self.dev)[None, :]
            mask = torch.ones((sq, skv), dtype=torch.bool, device=self.dev)
            if left >= 0:
                mask &= j >= i - left
            if job["causal"]:
                mask &= j <= i
            elif right >= 0:
                mask &= j <= i + right
            return self.F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=job["scale"], **gqa)
        # Bottom-right causal alignment for Sq != Skv, as attn's ABI defines it.
        if job["causal"] and sq != skv:
            from torch.nn.attention.bias import causal_lower_right
            return self.F.scaled_dot_product_attention(
                q, k, v, attn_mask=causal_lower_right(sq, skv), scale=job["scale"], **gqa)
        return self.F.scaled_dot_product_attention(q, k, v, is_causal=job["causal"], scale=job["scale"], **gqa)

    def load(self, path, dtype):
        np, torch = self.np, self.torch
        arr = np.load(path)
        t = torch.from_numpy(arr.astype(np.uint16) if dtype == "bf16" and arr.dtype != np.uint16 else arr)
        if dtype == "bf16":
            t = t.view(torch.bfloat16)
        return t.to(self.dev)

    def run(self, job):
        torch, np = self.torch, self.np
        q, k, v = (self.load(job[x], job["dtype"]) for x in ("q", "k", "v"))
        with self.backend(job["backend"]), torch.no_grad():
            o = self.sdpa(q, k, v, job)
        torch.cuda.synchronize()
        if job["dtype"] == "bf16":
            arr = o.view(torch.int16).cpu().numpy().view(np.uint16)
        else:
            arr = o.cpu().numpy()
        np.save(job["out"], arr)
        return {"out": job["out"]}

    def prepare_timing(self, job):
        """Inputs, flush buffer and graphs of one problem, kept while the same problem is timed."""
        key = json.dumps({k: job.get(k) for k in ("shape", "kv_heads", "dtype", "causal", "window", "scale",
                                                  "backend", "mode", "sets", "seed", "flush_bytes")},
                         sort_keys=True)
        if key == self.timing_key:
            return self.timing_state
        self.timing_key, self.timing_state = None, None
        torch = self.torch
        b, h, sq, skv, d = job["shape"]
        hkv = job.get("kv_heads", h)
        dtype = self.dtypes[job["dtype"]]
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(job["seed"])
        sets = []
        for _ in range(max(1, job["sets"])):
            q = torch.randn((b, h, sq, d), generator=gen, device=self.dev, dtype=torch.float32).to(dtype)
            k = torch.randn((b, hkv, skv, d), generator=gen, device=self.dev, dtype=torch.float32).to(dtype)
            v = torch.randn((b, hkv, skv, d), generator=gen, device=self.dev, dtype=torch.float32).to(dtype)
            sets.append((q, k, v))
        state = {"sets": sets, "counter": 0, "graphs": None,
                 "flush": torch.empty(job["flush_bytes"], dtype=torch.uint8, device=self.dev)}
        if job["mode"] in ("graph", "batch"):
            # One graph per input set, captured after a warm-up on a side stream (PyTorch's
            # recipe), so that replays time the kernels and not Python's dispatch (in batch mode
            # too: back-to-back calls from Python leave the GPU idle between small kernels, and
            # a candidate launched from Rust would look many times faster for the wrong reason).
            with self.backend(job["backend"]), torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for q, k, v in sets:
                        self.sdpa(q, k, v, job)
                torch.cuda.current_stream().wait_stream(side)
                graphs = []
                for q, k, v in sets:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        self.sdpa(q, k, v, job)
                    graphs.append(g)
            state["graphs"] = graphs
        self.timing_key, self.timing_state = key, state
        return state

    def time(self, job):
        torch = self.torch
        state = self.prepare_timing(job)
        sets, graphs, flush = state["sets"], state["graphs"], state["flush"]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        per_sample = job["batch_launches"] if job["mode"] == "batch" else 1

        def next_set():
            state["counter"] += 1
            return state["counter"] % len(sets)

        def launch(i):
            q, k, v = sets[i]
            return self.sdpa(q, k, v, job)

        def timed():
            i = next_set()
            if graphs is not None:
                graphs[i].replay()
            else:
                launch(i)

        samples, wall, guard_events = [], [], []
        with self.backend(job["backend"]), torch.no_grad():
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
            for i in range(job["guard_launches"]):
                t0 = time.perf_counter()
                start.record()
                launch(i % len(sets))
                end.record()
                torch.cuda.synchronize()
                wall.append((time.perf_counter() - t0) * 1e6)
                guard_events.append(start.elapsed_time(end) * 1000.0)
        return {"samples_us": samples, "wall_us": wall, "guard_event_us": guard_events,
                "launches_per_sample": per_sample}


if __name__ == "__main__":
    main()
