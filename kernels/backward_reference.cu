// backward_reference.cu — the gate's own backward kernels, in f32, simple and obviously right (not
// a candidate): the forward with its row log-sum-exps, to make a backward's inputs O and LSE, and
// the whole gradient, to check every element of a candidate's dQ, dK and dV.
//
// `reference_fwd_lse` computes attention as reference.cu's attn_reference does (one warp per query
// row, two plain passes over the visible keys: the row maximum, then the exponentials with expf
// and the weighted sum of V) and writes O in the ABI's element type and LSE = m + logf(l), natural
// log, in f32 (README.md, "Backward entry point"). A row that sees no key writes O = 0 and
// LSE = -inf.
//
// `reference_bwd` computes the backward pass's math of README.md from Q, K, V, O, dO and the LSE
// given: P = expf(scale·q·k - LSE), D_i = Σ dO∘O, dS = P∘(dO·vᵀ - D_i), dQ = scale·dS·K,
// dK = scale·dSᵀ·Q, dV = Pᵀ·dO, all in f32, written as f32 in the layouts of Q, K and V; beside each
// element its rounding scale, the square root of the sum of its terms' sizes squared (dQ:
// scale·|dS|_ij·K_j over the keys, dK: scale·|dS|_ij·Q_i and dV: P_ij·dO_i over the group's rows,
// |dS|_ij = P_ij·(|dP_ij| + |D_i|), the size at which a rounded dP − D is off), which bounds the
// error of a kernel that rounds P and dS to the input type (attn-oracle's backward_with_scales,
// in f32 here). P, scale·|dS| and each scale count no smaller than the input type's smallest
// normal (SMALLEST_NORMAL): below it rounding errs by u times that normal. A warp per
// output row, lane l holding elements l, l + 32, ...; every sum is a plain loop in a fixed order
// and no atomics are used, so the result is the same bits on every launch. A dQ row loops over the
// keys its query row sees; a dK/dV row (one key of one K/V head) loops over the query heads of the
// K/V head's group in head order and, in each, over every query row, taking those that see the key
// (row_kv_lo(i) <= j < row_kv_hi(i)), recomputing D_i for each. A query row that sees no key has
// dQ = 0 and adds nothing (its LSE is never read); a key that no row sees has dK = dV = 0.
//
// Grid: (ceil(rows / ROWS_PER_BLOCK)), block ROWS_PER_BLOCK · 32, no shared memory.
//   reference_fwd_lse: rows = B·H·S_q (dense) or total_q·H (varlen), in Q's row order.
//   reference_bwd: rows = q_rows + kv_rows, warps 0 .. q_rows - 1 taking dQ rows in Q's row order,
//   the rest dK/dV rows in K's row order (kv_rows = B·H_kv·S_kv, or total_kv·H_kv).
// Layouts: kernels/README.md's. Dense Q, O, dO and dQ [B, H, S_q, D], K, V, dK and dV
// [B, H_kv, S_kv, D], LSE [B, H, S_q]; varlen Q, O, dO, dQ [total_q, H, D], K, V, dK, dV
// [total_kv, H_kv, D], LSE [total_q, H]. Grouped heads, windows and the bottom-right causal mask
// as its "Variants" section defines them.
#include "attn_common.cuh"

#define ROWS_PER_BLOCK 4
#define DIMS_PER_LANE ((HEAD_DIM + 31) / 32)

// The input type's smallest positive normal number (attn-problem's DType::smallest_normal).
#if defined(ATTN_DTYPE_BF16)
#define SMALLEST_NORMAL 1.17549435e-38f
#else
#define SMALLEST_NORMAL 6.103515625e-05f
#endif

namespace backward_reference {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// The sequence holding packed token `token`: the last b with cu[b] <= token (an empty sequence has
// cu[b] == cu[b + 1], so the search passes over it to the one that holds the token).
__device__ __forceinline__ int sequence_of(const int* __restrict__ cu, int batch, int token) {
    int lo = 0, hi = batch;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (cu[mid] <= token) lo = mid; else hi = mid;
    }
    return lo;
}

// Sequence, head and row within the sequence of flat row `flat` of a side with `heads` heads:
// dense [B, heads, S] row-major, or packed [total, heads] (varlen, `cu` its offsets).
__device__ __forceinline__ void locate(long long flat, int heads, int seq, const int* __restrict__ cu, int batch,
                                       int& b, int& h, int& row) {
    if (cu == nullptr) {
        const long long bh = flat / seq;
        b = (int)(bh / heads);
        h = (int)(bh % heads);
        row = (int)(flat % seq);
    } else {
        const int token = (int)(flat / heads);
        h = (int)(flat % heads);
        b = sequence_of(cu, batch, token);
        row = token - cu[b];
    }
}

// Σ x·y over a row whose lane-held part is `x` and whose elements `y` lie in memory.
__device__ __forceinline__ float dot_row(const float (&x)[DIMS_PER_LANE], const elem_t* __restrict__ y, int lane) {
    float partial = 0.0f;
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < HEAD_DIM) partial += x[e] * to_float(y[d]);
    }
    return warp_sum(partial);
}

__device__ __forceinline__ void load_row(float (&x)[DIMS_PER_LANE], const elem_t* __restrict__ row, int lane) {
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        x[e] = d < HEAD_DIM ? to_float(row[d]) : 0.0f;
    }
}

__device__ __forceinline__ void store_row(float* __restrict__ row, const float (&x)[DIMS_PER_LANE], float factor,
                                          int lane) {
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < HEAD_DIM) row[d] = x[e] * factor;
    }
}
// A row of sums of squares stored as their square roots times `factor`.
__device__ __forceinline__ void store_root(float* __restrict__ row, const float (&x)[DIMS_PER_LANE], float factor,
                                           int lane) {
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < HEAD_DIM) row[d] = fmaxf(sqrtf(x[e]) * factor, SMALLEST_NORMAL);
    }
}

}  // namespace backward_reference

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
reference_fwd_lse(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                  elem_t* __restrict__ o, float* __restrict__ lse, int batch, int heads, int kv_heads, int seq_q,
                  int seq_kv, float scale, int causal, int window_left, int window_right,
                  const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_kv, long long rows) {
    using namespace backward_reference;
    const int lane = threadIdx.x % 32;
    const long long flat_row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (flat_row >= rows) return;  // the whole warp leaves together
    int b, h, row;
    locate(flat_row, heads, seq_q, cu_seqlens_q, batch, b, h, row);
    const attn::HeadView view = attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
    float q_reg[DIMS_PER_LANE];
    load_row(q_reg, q + view.q + (long long)row * view.q_stride, lane);
    const int kv_begin = attn::row_kv_lo(row, view.seq_q, view.seq_kv, window_left);
    const int kv_end = attn::row_kv_hi(row, view.seq_q, view.seq_kv, causal, window_right);
    const elem_t* k_head = k + view.kv;
    const elem_t* v_head = v + view.kv;

    // Pass 1: the row maximum of the scaled scores.
    float m = -INFINITY;
    for (int j = kv_begin; j < kv_end; ++j)
        m = fmaxf(m, dot_row(q_reg, k_head + (long long)j * view.kv_stride, lane) * scale);
    // Pass 2: exp(s - m), their sum, and the weighted sum of V.
    float acc[DIMS_PER_LANE];
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) acc[e] = 0.0f;
    float l = 0.0f;
    for (int j = kv_begin; j < kv_end; ++j) {
        const float p = expf(dot_row(q_reg, k_head + (long long)j * view.kv_stride, lane) * scale - m);
        l += p;
        const elem_t* v_row = v_head + (long long)j * view.kv_stride;
#pragma unroll
        for (int e = 0; e < DIMS_PER_LANE; ++e) {
            const int d = lane + 32 * e;
            if (d < HEAD_DIM) acc[e] += p * to_float(v_row[d]);
        }
    }
    // A row that sees no key: O = 0 and LSE = -inf, the log of its empty sum.
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    elem_t* o_row = o + flat_row * HEAD_DIM;
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < HEAD_DIM) o_row[d] = from_float(acc[e] * inv_l);
    }
    if (lane == 0) lse[flat_row] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// No __launch_bounds__: with it ptxas gives this entry a stack frame on sm_80.
extern "C" __global__ void
reference_bwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
              const elem_t* __restrict__ o, const elem_t* __restrict__ d_o, const float* __restrict__ lse,
              float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv, float* __restrict__ dq_scale,
              float* __restrict__ dk_scale, float* __restrict__ dv_scale, int batch, int heads,
              int kv_heads, int seq_q, int seq_kv, float scale, int causal, int window_left, int window_right,
              const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_kv, long long q_rows,
              long long kv_rows) {
    using namespace backward_reference;
    const int lane = threadIdx.x % 32;
    const long long warp_row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (warp_row >= q_rows + kv_rows) return;  // the whole warp leaves together
    const int group = heads / kv_heads;

    if (warp_row < q_rows) {
        // ---- one dQ row: the keys its query row sees -------------------------------------------
        const long long flat_row = warp_row;
        int b, h, row;
        locate(flat_row, heads, seq_q, cu_seqlens_q, batch, b, h, row);
        const attn::HeadView view =
            attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
        const int kv_begin = attn::row_kv_lo(row, view.seq_q, view.seq_kv, window_left);
        const int kv_end = attn::row_kv_hi(row, view.seq_q, view.seq_kv, causal, window_right);
        float acc[DIMS_PER_LANE], acc_sq[DIMS_PER_LANE];
#pragma unroll
        for (int e = 0; e < DIMS_PER_LANE; ++e) acc[e] = acc_sq[e] = 0.0f;
        if (kv_begin < kv_end) {
            const long long at = view.q + (long long)row * view.q_stride;
            float q_reg[DIMS_PER_LANE], do_reg[DIMS_PER_LANE];
            load_row(q_reg, q + at, lane);
            load_row(do_reg, d_o + at, lane);
            const float delta = dot_row(do_reg, o + at, lane);
            const float row_lse = lse[flat_row];
            for (int j = kv_begin; j < kv_end; ++j) {
                const elem_t* k_row = k + view.kv + (long long)j * view.kv_stride;
                const float p = expf(dot_row(q_reg, k_row, lane) * scale - row_lse);
                const float dp = dot_row(do_reg, v + view.kv + (long long)j * view.kv_stride, lane);
                const float ds = p * (dp - delta);
                const float ds_size = fmaxf(scale * p * (fabsf(dp) + fabsf(delta)), SMALLEST_NORMAL);
#pragma unroll
                for (int e = 0; e < DIMS_PER_LANE; ++e) {
                    const int d = lane + 32 * e;
                    if (d < HEAD_DIM) {
                        const float x = to_float(k_row[d]);
                        const float size = ds_size * x;
                        acc[e] += ds * x;
                        acc_sq[e] += size * size;
                    }
                }
            }
        }
        store_row(dq + flat_row * HEAD_DIM, acc, scale, lane);
        store_root(dq_scale + flat_row * HEAD_DIM, acc_sq, 1.0f, lane);
        return;
    }

    // ---- one dK/dV row: key j of K/V head g, over its group's query heads and their rows ---------
    const long long flat_key = warp_row - q_rows;
    int b, g, j;
    locate(flat_key, kv_heads, seq_kv, cu_seqlens_kv, batch, b, g, j);
    float k_reg[DIMS_PER_LANE], v_reg[DIMS_PER_LANE], dk_acc[DIMS_PER_LANE], dv_acc[DIMS_PER_LANE];
    float dk_sq[DIMS_PER_LANE], dv_sq[DIMS_PER_LANE];
    const attn::HeadView first =
        attn::head_view(b, g * group, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
    const long long key_at = first.kv + (long long)j * first.kv_stride;
    load_row(k_reg, k + key_at, lane);
    load_row(v_reg, v + key_at, lane);
#pragma unroll
    for (int e = 0; e < DIMS_PER_LANE; ++e) dk_acc[e] = dv_acc[e] = dk_sq[e] = dv_sq[e] = 0.0f;
    for (int hh = 0; hh < group; ++hh) {
        const attn::HeadView view =
            attn::head_view(b, g * group + hh, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
        for (int i = 0; i < view.seq_q; ++i) {
            const bool sees = attn::row_kv_lo(i, view.seq_q, view.seq_kv, window_left) <= j &&
                              j < attn::row_kv_hi(i, view.seq_q, view.seq_kv, causal, window_right);
            if (!sees) continue;  // uniform over the warp
            const long long at = view.q + (long long)i * view.q_stride;
            float do_reg[DIMS_PER_LANE];
            load_row(do_reg, d_o + at, lane);
            const float delta = dot_row(do_reg, o + at, lane);
            // Q's row order is the LSE's: the row's element offset over D.
            const float row_lse = lse[at / HEAD_DIM];
            const float p = expf(dot_row(k_reg, q + at, lane) * scale - row_lse);
            const float dp = dot_row(v_reg, d_o + at, lane);
            const float ds = p * (dp - delta);
            const float ds_size = fmaxf(scale * p * (fabsf(dp) + fabsf(delta)), SMALLEST_NORMAL);
            const float p_size = fmaxf(p, SMALLEST_NORMAL);
            const elem_t* q_row = q + at;
#pragma unroll
            for (int e = 0; e < DIMS_PER_LANE; ++e) {
                const int d = lane + 32 * e;
                if (d < HEAD_DIM) {
                    const float x = to_float(q_row[d]);
                    const float dk_size = ds_size * x, dv_size = p_size * do_reg[e];
                    dk_acc[e] += ds * x;
                    dv_acc[e] += p * do_reg[e];
                    dk_sq[e] += dk_size * dk_size;
                    dv_sq[e] += dv_size * dv_size;
                }
            }
        }
    }
    store_row(dk + flat_key * HEAD_DIM, dk_acc, scale, lane);
    store_row(dv + flat_key * HEAD_DIM, dv_acc, 1.0f, lane);
    store_root(dk_scale + flat_key * HEAD_DIM, dk_sq, 1.0f, lane);
    store_root(dv_scale + flat_key * HEAD_DIM, dv_sq, 1.0f, lane);
}

// count_bad_gradient: how many of a gradient's n elements (the candidate's, elem_t) are poison,
// NaN/Inf, or off the reference `ref` by more than max(atol, rtol·|ref|, spread·rtol·scale), with
// `scale` the element's rounding scale from reference_bwd: attn-oracle's compare_gradient on the
// GPU, added to bad[slot]. Launched after every timed sample without a host wait; the counts are
// read at the end.
extern "C" __global__ void count_bad_gradient(const elem_t* __restrict__ out, const float* __restrict__ ref,
                                              const float* __restrict__ scale, float atol, float rtol, float spread,
                                              unsigned short poison_bits, long long n, unsigned int* __restrict__ bad,
                                              int slot) {
    unsigned int count = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned short bits = reinterpret_cast<const unsigned short*>(out)[i];
        const float x = to_float(out[i]);
        const float expected = ref[i];
        const float bound = fmaxf(fmaxf(atol, rtol * fabsf(expected)), spread * rtol * scale[i]);
        const bool nonfinite = (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
        if (bits == poison_bits || nonfinite || !(fabsf(x - expected) <= bound)) ++count;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) count += __shfl_xor_sync(0xffffffffu, count, offset);
    if (threadIdx.x % 32 == 0 && count > 0) atomicAdd(&bad[slot], count);
}
