import sys, numpy as np
sys.path.insert(0, "crates/attn-measure/src")
import sdpa_helper
f = sdpa_helper.Fa3(np)
b,hq,hkv,s,d = 2,32,8,8192,128
job = dict(shape=[b,hq,s,s,d], kv_heads=hkv, dtype="fp16", causal=False, window=[-1,-1], scale=d**-0.5,
           sets=2, seed=7, batch_launches=1, mode="batch", warmup=0, samples=1)
import jax
st = f.prepare(job)
jax.block_until_ready(st["fn"](*st["flat"]))
