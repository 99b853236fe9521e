"""A small, correct Triton kernel of the plain forward ABI (kernels/README.md, "Entry point"):
dense multi-head attention, causal (aligned bottom-right) or not, fp16 and bf16, any HEAD_DIM that
is a power of two from 16. Start from it for your own Triton kernel:

    cargo xtask kernels --triton kernels/examples/starter_triton.py:attn_fwd   # compile check, no GPU

One program per (BLOCK_M query rows, head, batch): the host's grid is (ceil(S_q / BLOCK_M), H, B)
from the BLOCK_M define, and NUM_WARPS (default 4) and STAGES (default 2) become Triton's
num_warps and num_stages. Its online softmax runs in base 2 with scale · log2(e) folded in; a row
that sees no key writes zeros, as the ABI asks.
"""

import triton
import triton.language as tl


@triton.jit
def attn_fwd(q, k, v, o, batch, heads, seq_q, seq_kv, scale, causal,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    # 64-bit offsets: B · H · S · D passes 2^31 at long sequences.
    bh = b.to(tl.int64) * heads + head
    q += bh * seq_q * HEAD_DIM
    k += bh * seq_kv * HEAD_DIM
    v += bh * seq_kv * HEAD_DIM
    o += bh * seq_q * HEAD_DIM

    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    row_in = rows < seq_q
    q_tile = tl.load(q + rows[:, None] * HEAD_DIM + cols[None, :], mask=row_in[:, None], other=0.0)

    # Keys row i sees: j < kv_end(i) = i + 1 + S_kv − S_q when causal, else all S_kv.
    kv_end = tl.where(causal != 0, rows + 1 + seq_kv - seq_q, seq_kv)
    kv_end = tl.minimum(tl.maximum(kv_end, 0), seq_kv)
    block_end = tl.max(tl.where(row_in, kv_end, 0), axis=0)

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
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row with no key yet keeps max −inf: subtract 0 instead, so no NaN appears.
        m_used = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_used[:, None])
        alpha = tl.math.exp2(m_i - m_used)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_tile = tl.load(v + keys[:, None] * HEAD_DIM + cols[None, :], mask=key_in[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_tile.dtype), v_tile)
        m_i = m_new
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(o + rows[:, None] * HEAD_DIM + cols[None, :], out.to(o.dtype.element_ty), mask=row_in[:, None])
