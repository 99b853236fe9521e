"""FlashInfer's paged decode on the GPU machine, checked and timed: whether its wheels import and
its kernels JIT-compile with the machine's nvcc, how long that takes, and its bandwidth at decode
batches, each checked against SDPA on the same cache gathered contiguous before it is timed.

Usage (on the GPU machine, FlashInfer's wheels installed, e.g. PYTHONPATH=/tmp/site):
  python3 scripts/flashinfer_probe.py OUT.json [B,Q,KV,H,HKV,PAGE ...]
Timing: each call replayed 20 times in one CUDA graph per sample, 15 samples, the median sample
divided by 20 (graph mode, resident inputs); bytes = the K/V a launch must read plus Q and O.
"""
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

DTYPE = torch.bfloat16
D = 128
REPS, SAMPLES = 20, 15
DEFAULT = ["64,1,8192,32,8,16", "16,1,8192,32,8,16", "8,1,131072,32,8,64", "64,4,8192,32,8,16",
           "32,8,16384,32,8,64", "16,16,32768,32,8,16"]


def cache(b, kv, hkv, page, gen):
    """A paged cache of b sequences of kv keys each, pages shuffled over the pool."""
    pages_per = (kv + page - 1) // page
    total = b * pages_per
    k = torch.randn(total, page, hkv, D, generator=gen, device="cuda").to(DTYPE)
    v = torch.randn(total, page, hkv, D, generator=gen, device="cuda").to(DTYPE)
    perm = torch.randperm(total, generator=gen, device="cuda").int()
    indptr = torch.arange(0, total + 1, pages_per, device="cuda", dtype=torch.int32)
    last = torch.full((b,), kv - (pages_per - 1) * page, device="cuda", dtype=torch.int32)
    return k, v, perm, indptr, last, pages_per


def contiguous(t, perm, b, pages_per, kv):
    """[B, H_kv, KV, D] from the paged pool through the block table."""
    g = t[perm.long()].view(b, pages_per * t.shape[1], t.shape[2], D)[:, :kv]
    return g.permute(0, 2, 1, 3).contiguous()


def graph_time(fn):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(REPS):
            fn()
    g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(SAMPLES):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        e.record()
        e.synchronize()
        samples.append(a.elapsed_time(e) * 1e3 / REPS)
    return sorted(samples)[len(samples) // 2], samples


def main():
    out_path = sys.argv[1]
    shapes = sys.argv[2:] or DEFAULT
    record = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
              "dtype": "bf16", "head_dim": D, "timing": f"CUDA graph of {REPS} calls, {SAMPLES} samples, median",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": []}
    t0 = time.time()
    # The attention modules alone: a slimmed wheel (scripts/fetch-flashinfer.sh) has no MoE or GEMMs.
    import flashinfer
    import flashinfer.decode
    import flashinfer.prefill
    record["flashinfer"] = flashinfer.__version__
    record["import_s"] = round(time.time() - t0, 2)
    print(f"flashinfer {flashinfer.__version__} imported in {record['import_s']} s", flush=True)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda")
    for text in shapes:
        b, q_len, kv, h, hkv, page = map(int, text.split(","))
        gen.manual_seed(1234 + b + kv)
        k, v, perm, indptr, last, pages_per = cache(b, kv, hkv, page, gen)
        q = torch.randn(b * q_len, h, D, generator=gen, device="cuda").to(DTYPE)
        kc, vc = contiguous(k, perm, b, pages_per, kv), contiguous(v, perm, b, pages_per, kv)
        qd = q.view(b, q_len, h, D).transpose(1, 2)
        causal_mask = None
        if q_len > 1:
            # The new tokens sit at the end of their sequence (bottom-right causal alignment).
            causal_mask = torch.ones(q_len, kv, dtype=torch.bool, device="cuda").tril(kv - q_len)
        want = F.scaled_dot_product_attention(qd.float(), kc.float(), vc.float(), attn_mask=causal_mask,
                                              enable_gqa=True).transpose(1, 2).reshape(b * q_len, h, D)
        sdpa = lambda: F.scaled_dot_product_attention(qd, kc, vc, attn_mask=causal_mask, enable_gqa=True)
        nbytes = 2 * b * kv * hkv * D * 2 + 2 * b * q_len * h * D * 2
        variants = []
        if q_len == 1:
            for tc in (False, True):
                w = flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                variants.append((f"decode tc={tc}", w, {}))
        w = flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
        variants.append(("paged-prefill", w, {"causal": True, "qo": True}))
        for name, w, opts in variants:
            row = {"shape": text, "impl": f"flashinfer {name}"}
            try:
                t1 = time.time()
                if opts.get("qo"):
                    qo = torch.arange(0, b * q_len + 1, q_len, device="cuda", dtype=torch.int32)
                    w.plan(qo, indptr, perm, last, h, hkv, D, page, causal=True, q_data_type=DTYPE, kv_data_type=DTYPE)
                else:
                    w.plan(indptr, perm, last, h, hkv, D, page, q_data_type=DTYPE, kv_data_type=DTYPE)
                got = w.run(q, (k, v))
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.time() - t1, 1)
                err = (got.float() - want).abs().max().item()
                row["max_abs_vs_f32_sdpa"] = err
                row["checked"] = err < 2e-2
                if row["checked"]:
                    med, samples = graph_time(lambda: w.run(q, (k, v)))
                    row.update(us=med, samples_us=samples, tbs=nbytes / med / 1e6)
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run a problem is said so
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps({k_: v_ for k_, v_ in row.items() if k_ != "samples_us"}), flush=True)
            record["rows"].append(row)
            save(record, out_path)
        med, samples = graph_time(sdpa)
        row = {"shape": text, "impl": "sdpa default (contiguous)", "us": med, "samples_us": samples,
               "tbs": nbytes / med / 1e6}
        print(json.dumps({k_: v_ for k_, v_ in row.items() if k_ != "samples_us"}), flush=True)
        record["rows"].append(row)
        del k, v, kc, vc
        torch.cuda.empty_cache()
    save(record, out_path)


def save(record, path):
    """Written after every row (atomically), so that a run stopped at its limit keeps its rows."""
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
