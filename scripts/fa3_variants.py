"""FlashAttention-3 on grouped-query and sliding-window problems, for comparison with attn's own
kernels timed in the same device call (`xtask bench --mode batch`).

Usage on a Hopper GPU machine with JAX (CUDA 13), PyTorch and FA3's prebuilt library (see
../shared/anchors/fa3/README.md for how to fetch it):
    python3 scripts/fa3_variants.py LIBFA3.so --shape "2,32/8,4096,128 causal window=4096,-1" ...
        [--dtype fp16|bf16] [--samples 30] [--out DIR]

Shapes are attn's problem strings (`B,HQ/HKV,S,D [causal] [window=L,R]`). Each sample is the mean
of N back-to-back calls (N chosen so that a sample takes about 20 ms), inputs resident, L2 not
flushed, 3 warm-up samples dropped: the protocol of `xtask bench --mode batch`, except that JAX
has no CUDA events, so a batch is timed by the host clock and ended by a device sync (hidden
behind the queue at the sizes this is meant for, hundreds of µs per call and up). TFLOP/s count
the (query, key) pairs the mask lets through, as attn's evidence does. The output is checked
against a float32 reference on a sample of rows. With --out, raw samples (µs per call, one a
line) per shape.
"""
import argparse, ctypes, os, time
import numpy as np
import jax, jax.numpy as jnp


def parse(text):
    words = text.split()
    b, heads, s, d = words[0].split(",")
    hq, hkv = (int(x) for x in (heads.split("/") + [heads])[:2])
    causal = "causal" in words
    left = right = -1
    for w in words[1:]:
        if w.startswith("window="):
            left, right = (int(x) for x in w[len("window="):].split(","))
    return int(b), hq, hkv, int(s), int(d), causal, left, right


def visible_pairs(s, causal, left, right):
    i = np.arange(s)
    lo = np.zeros(s, dtype=np.int64) if left < 0 else np.clip(i - left, 0, s)
    r = 0 if causal else right
    hi = np.full(s, s, dtype=np.int64) if r < 0 else np.clip(i + 1 + r, 0, s)
    return int(np.maximum(hi - lo, 0).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    jdt = jnp.float16 if args.dtype == "fp16" else jnp.bfloat16
    lib = ctypes.cdll.LoadLibrary(args.lib)
    jax.ffi.register_ffi_target("dew_flash3_mha_fwd", jax.ffi.pycapsule(lib.dew_flash3_mha_fwd), platform="CUDA")
    print(f"{'problem':44} {'FA3 µs':>9} {'TFLOP/s':>8} {'max|err|':>9}")
    for text in args.shape:
        b, hq, hkv, s, d, causal, left, right = parse(text)
        right_arg = 0 if causal else right

        def fa3(q, k, v):
            results = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, hq, s), jnp.float32),
                       jax.ShapeDtypeStruct((1, 1, 1, 1), jnp.float32), jax.ShapeDtypeStruct((1, 1, 1), jnp.float32))
            out, _, _, _ = jax.ffi.ffi_call("dew_flash3_mha_fwd", results)(
                q, k, v, softmax_scale=np.float64(d ** -0.5), is_causal=causal,
                window_size_left=np.int64(left), window_size_right=np.int64(right_arg))
            return out

        key = jax.random.PRNGKey(0)
        q, k, v = (jax.random.normal(jax.random.fold_in(key, i), (b, s, hq if i == 0 else hkv, d), jdt)
                   for i in range(3))
        f = jax.jit(fa3)
        out = np.asarray(f(q, k, v).block_until_ready(), dtype=np.float32)
        # Reference on rows of batch 0, head 0 (K/V head 0): every 97th row and the last.
        qn, kn, vn = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
        err = 0.0
        for row in list(range(0, s, 97)) + [s - 1]:
            lo = 0 if left < 0 else max(0, row - left)
            hi = s if right_arg < 0 else min(s, row + 1 + right_arg)
            logits = (kn[0, lo:hi, 0] @ qn[0, row, 0]) * d ** -0.5
            p = np.exp(logits - logits.max())
            ref = (p / p.sum()) @ vn[0, lo:hi, 0]
            err = max(err, float(np.abs(out[0, row, 0] - ref).max()))
        flop = 4.0 * b * hq * d * visible_pairs(s, causal, left, right)
        per_batch = max(1, int(20e-3 / (flop / 500e12)))
        state = {}
        for _ in range(3):
            state["o"] = f(q, k, v)
        state["o"].block_until_ready()
        times = []
        for _ in range(args.samples + 3):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                state["o"] = f(q, k, v)
            state["o"].block_until_ready()
            times.append((time.perf_counter() - t0) / per_batch * 1e6)
        times = np.array(times[3:])
        med = float(np.median(times))
        print(f"{text:44} {med:9.1f} {flop / med / 1e6:8.1f} {err:9.2e}", flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            tag = text.replace(",", "-").replace(" ", "_").replace("/", "kv").replace("=", "")
            np.savetxt(f"{args.out}/fa3-{tag}-{args.dtype}.txt", times, fmt="%.3f")


if __name__ == "__main__":
    main()
