"""Planted Triton kernels for the adversarial suite (tests/planted.rs): the starter kernel of
kernels/examples/starter_triton.py with one defect each, chosen by the PLANT constexpr. PLANT=0 is
the honest starter. Each defect mirrors a planted CUDA kernel of planted.cu, so that a Triton
kernel must be rejected by the same defence for the same reason:

  1  writes nothing (planted.cu 1)             -> unwritten output
  2  no running max: exp2 of the raw scores (5) -> non-finite output
  3  ignores causal (6)                         -> incorrect
  4  uses 1/sqrt(HEAD_DIM), not `scale` (12)   -> incorrect, named by the scale
"""

import triton
import triton.language as tl


@triton.jit
def attn_fwd(q, k, v, o, batch, heads, seq_q, seq_kv, scale, causal,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PLANT: tl.constexpr):
    if PLANT == 1:
        return
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    bh = b.to(tl.int64) * heads + head
    q += bh * seq_q * HEAD_DIM
    k += bh * seq_kv * HEAD_DIM
    v += bh * seq_kv * HEAD_DIM
    o += bh * seq_q * HEAD_DIM

    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    row_in = rows < seq_q
    q_tile = tl.load(q + rows[:, None] * HEAD_DIM + cols[None, :], mask=row_in[:, None], other=0.0)

    is_causal = causal != 0
    if PLANT == 3:
        is_causal = causal != causal
    kv_end = tl.where(is_causal, rows + 1 + seq_kv - seq_q, seq_kv)
    kv_end = tl.minimum(tl.maximum(kv_end, 0), seq_kv)
    block_end = tl.max(tl.where(row_in, kv_end, 0), axis=0)

    if PLANT == 4:
        qk_scale = (1.0 / tl.sqrt(HEAD_DIM * 1.0)) * 1.4426950408889634
    else:
        qk_scale = scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, block_end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        key_in = keys < seq_kv
        k_tile = tl.load(k + keys[:, None] * HEAD_DIM + cols[None, :], mask=key_in[:, None], other=0.0)
        s = tl.dot(q_tile, tl.trans(k_tile)) * qk_scale
        seen = keys[None, :] < kv_end[:, None]
        s = tl.where(seen, s, float("-inf"))
        if PLANT == 2:
            # No running max: the raw exponentials, which overflow f32 on large logits.
            m_used = tl.zeros([BLOCK_M], tl.float32)
            m_new = m_used
        else:
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_used = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_used[:, None])
        alpha = tl.math.exp2(m_i - m_used)
        if PLANT == 2:
            alpha = tl.full([BLOCK_M], 1.0, tl.float32)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_tile = tl.load(v + keys[:, None] * HEAD_DIM + cols[None, :], mask=key_in[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_tile.dtype), v_tile)
        m_i = m_new
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(o + rows[:, None] * HEAD_DIM + cols[None, :], out.to(o.dtype.element_ty), mask=row_in[:, None])
