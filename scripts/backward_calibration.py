#!/usr/bin/env python3
"""How far PyTorch's own attention backward is from the exact gradients, in the units of the
oracle's backward tolerance (attn-oracle's `backward_tolerance` and `compare_gradient`).

For each shape, dtype and SDPA backend: fresh normal Q, K, V, dO in the dtype; the backend's
forward and backward; the exact gradients in f64 (autograd of the upcast inputs on the GPU); and
each gradient's error, against the exact gradients and against the oracle's from the backend's
own rounded O (D = rowsum(dO ∘ O) from it, as the oracle judges a kernel), in two element bounds, as multiples of them (an excess above 1 fails):
  rms    max(4·r·RMS(exact), r·|exact_i|): the bound before per-element scales;
  scaled that, or 4·r·s_i, with s_i = sqrt(sum of the element's terms squared) (dV: P·dO over the
         query rows, dK: scale·|dS|·Q, dQ: scale·|dS|·K, |dS| = P·(|dP| + |D|)), the oracle's `backward_scales`;
with r the dtype's relative bound (dV 2u + 2^-17, dQ and dK 3u + 2^-17). rel_l2/r is the
relative L2 error over its bound. Writes JSON (provenance and every row) to --out.
"""
import argparse
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
UNIT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
F32_ACCUMULATION = 2.0**-17
SPREAD = 4.0


def shape_of(text):
    """`B,H[/H_kv],S,D[,causal]`."""
    parts = text.split(",")
    causal = parts[-1] == "causal"
    if causal:
        parts = parts[:-1]
    b, heads, s, d = parts
    h, hkv = (heads.split("/") + [heads])[:2]
    return int(b), int(h), int(hkv), int(s), int(d), causal


def exact(q, k, v, d_o, causal, scale, given_o=None):
    """The f64 gradients and each element's term scale; with `given_o`, D = rowsum(dO ∘ O) from
    that O (a kernel's rounded forward output), as the oracle's `backward` takes it."""
    # Below the input type's smallest normal, rounding errs by u times that normal.
    normal = torch.finfo(q.dtype).tiny
    q, k, v, d_o = (t.double() for t in (q, k, v, d_o))
    group = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    logits = scale * q @ ke.transpose(-1, -2)
    if causal:
        s_q, s_kv = logits.shape[-2:]
        mask = torch.ones(s_q, s_kv, dtype=torch.bool, device=q.device).tril(s_kv - s_q)
        logits = logits.masked_fill(~mask, float("-inf"))
    p = torch.softmax(logits, -1)
    o = p @ ve
    dp = d_o @ ve.transpose(-1, -2)
    o = o if given_o is None else given_o.double()
    delta = (d_o * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    # The size at which dS is rounded: a kernel subtracts a rounded D from a rounded dP.
    ds_size = p * (dp.abs() + delta.abs())
    dq = scale * ds @ ke
    dk = scale * ds.transpose(-1, -2) @ q
    dv = p.transpose(-1, -2) @ d_o
    # The rounded operands' sizes, no smaller than the normals where a pair is visible.
    seen = torch.isfinite(logits)
    at_least = lambda t: torch.where(seen, t.clamp_min(normal), torch.zeros_like(t))
    ds_size, p_size = at_least(scale * ds_size), at_least(p)
    sq = lambda a, b: a.square() @ b.square()
    root = lambda t: t.sqrt().clamp_min(normal)
    dq_s = root(sq(ds_size, ke))
    dk_s2 = sq(ds_size.transpose(-1, -2), q)
    dv_s2 = sq(p_size.transpose(-1, -2), d_o)
    fold = lambda t: t.unflatten(1, (k.shape[1], group)).sum(2)
    return {
        "dq": (dq, dq_s),
        "dk": (fold(dk), root(fold(dk_s2))),
        "dv": (fold(dv), root(fold(dv_s2))),
    }


def excess(found, want, scales, r):
    err = (found.double() - want).abs()
    rms = want.square().mean().sqrt()
    base = torch.maximum(SPREAD * r * rms.expand_as(want), r * want.abs())
    scaled = torch.maximum(base, SPREAD * r * scales)
    return {
        "rel_l2_over_bound": float(err.norm() / want.norm().clamp_min(1e-300) / r),
        "excess_rms": float((err / base.clamp_min(1e-300)).max()),
        "excess_scaled": float((err / scaled.clamp_min(1e-300)).max()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for text in args.shape:
        b, h, hkv, s, d, causal = shape_of(text)
        scale = d**-0.5
        for dtype in (torch.float16, torch.bfloat16):
            u = UNIT[dtype]
            bound = {"dq": 3 * u + F32_ACCUMULATION, "dk": 3 * u + F32_ACCUMULATION,
                     "dv": 2 * u + F32_ACCUMULATION}
            for seed in range(args.seeds):
                g = torch.Generator(device="cuda").manual_seed(seed)
                draw = lambda heads: torch.randn(b, heads, s, d, generator=g, device="cuda").to(dtype)
                q, k, v, d_o = draw(h), draw(hkv), draw(hkv), draw(h)
                truth = exact(q, k, v, d_o, causal, scale)
                for name, backend in BACKENDS.items():
                    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                    try:
                        with sdpa_kernel(backend):
                            o = F.scaled_dot_product_attention(
                                *leaves, is_causal=causal, scale=scale, enable_gqa=h != hkv)
                            o.backward(d_o)
                        torch.cuda.synchronize()
                    except RuntimeError as e:
                        rows.append({"shape": text, "dtype": str(dtype), "backend": name,
                                     "seed": seed, "refused": str(e).splitlines()[0][:200]})
                        continue
                    given = exact(q, k, v, d_o, causal, scale, given_o=o.detach())
                    for against, truths in (("exact", truth), ("given_o", given)):
                        for grad, leaf in zip(("dq", "dk", "dv"), leaves):
                            want, scales = truths[grad]
                            rows.append({"shape": text, "dtype": str(dtype), "backend": name,
                                         "seed": seed, "gradient": grad, "against": against,
                                         **excess(leaf.grad, want, scales, bound[grad])})
    provenance = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "revision": os.environ.get("ATTN_REVISION", "unknown"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "seeds": args.seeds,
        "command": " ".join(sys.argv),
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"provenance": provenance, "rows": rows}, f, indent=1)
    os.replace(tmp, args.out)
    # The worst over seeds per (shape, dtype, backend, gradient).
    worst = {}
    for row in rows:
        if "gradient" not in row:
            continue
        key = (row["against"], row["shape"], row["dtype"][6:], row["backend"], row["gradient"])
        w = worst.setdefault(key, [0.0, 0.0, 0.0])
        for i, field in enumerate(("rel_l2_over_bound", "excess_rms", "excess_scaled")):
            w[i] = max(w[i], row[field])
    print(f"{'against':<8} {'shape':<24} {'dtype':<9} {'backend':<10} grad  relL2/r  rms-excess  scaled-excess")
    for (against, shape, dtype, backend, grad), (rl, er, es) in sorted(worst.items()):
        print(f"{against:<8} {shape:<24} {dtype:<9} {backend:<10} {grad:<5} {rl:7.3f}  {er:10.3f}  {es:13.3f}")
    for row in rows:
        if "refused" in row and row["seed"] == 0:
            print(f"refused: {row['shape']} {row['dtype']} {row['backend']}: {row['refused']}")


if __name__ == "__main__":
    main()
