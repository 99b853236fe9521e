// reference: the gate's whole-output check on the GPU.
//
// `attn_reference` computes attention in f32 with no tiling tricks: one warp per query row, two
// passes over the visible keys (the row maximum first, then the exponentials and the weighted sum
// of V), each score a plain dot product reduced by shuffles. Its output is f32, so the only
// rounding is f32 arithmetic: its error against the f64 oracle is measured on every check and
// recorded, and it must stay far under the tolerance it is used with.
//
// `compare_rows` compares a candidate's output (the ABI's element type) with that f32 reference,
// one warp per row, and writes per row: the largest |out - ref|, the number of elements beyond
// their bound (element_bound), of poison (never written) and of NaN/Inf elements, and the sums of (out - ref)^2 and
// ref^2 (for the relative L2 error).
//
// Grid: (ceil(rows / ROWS_PER_BLOCK)), block ROWS_PER_BLOCK * 32; rows = B * H * S_q (dense) or
// total_q * H (varlen). Grouped heads, sliding windows and packed varlen batches as
// kernels/README.md defines them ("Variants"); the output has the layout of Q.
//
// Masked storage. The timing keeps a reference per input set in device memory while the candidate
// runs; stored as the candidate should write it, a kernel that found it could copy it. So
// `attn_reference` can store it transformed: row r at row (perm_a * r + perm_b) mod rows, every
// 32-bit word XORed with row_mask(mask_key, r); `count_bad` undoes it on the fly. mask_key 0,
// perm_a 1, perm_b 0 is plain storage. The host mirror is attn-kernels' `RowMask`.
#include "attn_common.cuh"

#define ROWS_PER_BLOCK 4
#define DIMS_PER_LANE ((HEAD_DIM + 31) / 32)
#define ROW_STATS 6

__device__ __forceinline__ float bits_to_float(unsigned short bits) {
#if defined(ATTN_DTYPE_BF16)
    return __bfloat162float(__ushort_as_bfloat16(bits));
#else
    return __half2float(__ushort_as_half(bits));
#endif
}

__device__ __forceinline__ unsigned long long ref_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The XOR mask of row r's words (0 for plain storage).
__device__ __forceinline__ unsigned int row_mask(unsigned long long key, long long r) {
    return key ? (unsigned int)ref_mix(key ^ ((unsigned long long)r * 0x9e3779b97f4a7c15ull)) : 0u;
}

// Where row r is stored: (a·r + b) mod rows, a bijection for a coprime with rows (rows < 2^32).
__device__ __forceinline__ long long stored_row(long long r, long long rows, unsigned long long a, unsigned long long b) {
    return (long long)(((unsigned long long)r * a + b) % (unsigned long long)rows);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
attn_reference(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
               float* __restrict__ o, int batch, int heads, int kv_heads, int seq_q, int seq_kv, float scale,
               int causal, int window_left, int window_right, const int* __restrict__ cu_seqlens_q,
               const int* __restrict__ cu_seqlens_kv, long long rows, unsigned long long mask_key,
               unsigned long long perm_a, unsigned long long perm_b) {
    const int lane = threadIdx.x % 32;
    const long long flat_row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (flat_row >= rows) return;  // the whole warp leaves together
    // Output row flat_row: dense [B, H, S_q] row-major, or packed [total_q, H] (varlen), whose
    // sequence is found by binary search over the offsets.
    int b, h, row;
    if (cu_seqlens_q == nullptr) {
        const long long bh = flat_row / seq_q;
        b = (int)(bh / heads);
        h = (int)(bh % heads);
        row = (int)(flat_row % seq_q);
    } else {
        const int token = (int)(flat_row / heads);
        h = (int)(flat_row % heads);
        int lo = 0, hi = batch;  // the last sequence whose start is <= token
        while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            if (cu_seqlens_q[mid] <= token) lo = mid; else hi = mid;
        }
        b = lo;
        row = token - cu_seqlens_q[b];
    }
    const attn::HeadView view = attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
    const elem_t* q_row = q + view.q + (long long)row * view.q_stride;
    const elem_t* k_head = k + view.kv;
    const elem_t* v_head = v + view.kv;
    const long long kv_stride = view.kv_stride;
    seq_q = view.seq_q;
    seq_kv = view.seq_kv;

    float q_reg[DIMS_PER_LANE];
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        q_reg[i] = d < HEAD_DIM ? to_float(q_row[d]) : 0.0f;
    }
    const int kv_begin = attn::row_kv_lo(row, seq_q, seq_kv, window_left);
    const int kv_end = attn::row_kv_hi(row, seq_q, seq_kv, causal, window_right);

    // Pass 1: the row maximum of the scaled scores.
    float m = -INFINITY;
    for (int j = kv_begin; j < kv_end; ++j) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_head[j * kv_stride + d]);
        }
        m = fmaxf(m, warp_sum(partial) * scale);
    }
    // Pass 2: exp(s - m), their sum, and the weighted sum of V.
    float acc[DIMS_PER_LANE];
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) acc[i] = 0.0f;
    float l = 0.0f;
    for (int j = kv_begin; j < kv_end; ++j) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_head[j * kv_stride + d]);
        }
        const float p = expf(warp_sum(partial) * scale - m);
        l += p;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) acc[i] += p * to_float(v_head[j * kv_stride + d]);
        }
    }
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key is zero
    float* o_row = o + stored_row(flat_row, rows, perm_a, perm_b) * HEAD_DIM;
    const unsigned int mask = row_mask(mask_key, flat_row);
#pragma unroll
    for (int i = 0; i < DIMS_PER_LANE; ++i) {
        const int d = lane + 32 * i;
        if (d < HEAD_DIM) o_row[d] = __uint_as_float(__float_as_uint(acc[i] * inv_l) ^ mask);
    }
}

// How far an element may be off the reference r: the oracle's bound (atol, or rtol of an element
// larger than the tolerance table's magnitude) less the reference's own error (slack).
__device__ __forceinline__ float element_bound(float r, float atol, float rtol, float slack) {
    return fmaxf(atol, rtol * fabsf(r)) - slack;
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
compare_rows(const unsigned short* __restrict__ out, const float* __restrict__ ref, float atol, float rtol,
             float slack, unsigned short poison_bits, long long rows, float* __restrict__ stats) {
    const int lane = threadIdx.x % 32;
    const long long flat_row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (flat_row >= rows) return;
    float max_abs = 0.0f, bad = 0.0f, poison = 0.0f, nonfinite = 0.0f, diff_sq = 0.0f, ref_sq = 0.0f;
    for (int d = lane; d < HEAD_DIM; d += 32) {
        const unsigned short bits = out[flat_row * HEAD_DIM + d];
        const float r = ref[flat_row * HEAD_DIM + d];
        const float x = bits_to_float(bits);
        ref_sq += r * r;
        if (bits == poison_bits) {
            poison += 1.0f;
            bad += 1.0f;
        } else if ((__float_as_uint(x) & 0x7f800000u) == 0x7f800000u) {  // NaN or Inf
            nonfinite += 1.0f;
            bad += 1.0f;
        } else {
            const float err = fabsf(x - r);
            max_abs = fmaxf(max_abs, err);
            diff_sq += err * err;
            if (!(err <= element_bound(r, atol, rtol, slack))) bad += 1.0f;
        }
    }
    float* row_stats = stats + flat_row * ROW_STATS;
    max_abs = warp_max(max_abs);
    bad = warp_sum(bad);
    poison = warp_sum(poison);
    nonfinite = warp_sum(nonfinite);
    diff_sq = warp_sum(diff_sq);
    ref_sq = warp_sum(ref_sq);
    if (lane == 0) {
        row_stats[0] = max_abs;
        row_stats[1] = bad;
        row_stats[2] = poison;
        row_stats[3] = nonfinite;
        row_stats[4] = diff_sq;
        row_stats[5] = ref_sq;
    }
}

// count_bad: how many of an output's elements are poison, NaN/Inf, or off the reference by more
// than their bound (element_bound), added to bad[slot]. Launched without a host wait after every timed sample, so that
// verifying the timed outputs adds no idle gap between samples; the counts are read at the end.
// The reference may be stored masked (see the top of this file): mask_key, perm_a, perm_b as it was
// computed with.
extern "C" __global__ void count_bad(const unsigned short* __restrict__ out, const float* __restrict__ ref,
                                     float atol, float rtol, float slack, unsigned short poison_bits, long long n,
                                     unsigned int* __restrict__ bad, int slot, unsigned long long mask_key,
                                     unsigned long long perm_a, unsigned long long perm_b) {
    const long long rows = n / HEAD_DIM;
    unsigned int count = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / HEAD_DIM;
        const float expected = __uint_as_float(
            __float_as_uint(ref[stored_row(r, rows, perm_a, perm_b) * HEAD_DIM + i % HEAD_DIM]) ^ row_mask(mask_key, r));
        const unsigned short bits = out[i];
        const float x = bits_to_float(bits);
        const bool nonfinite = (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
        if (bits == poison_bits || nonfinite || !(fabsf(x - expected) <= element_bound(expected, atol, rtol, slack))) ++count;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) count += __shfl_xor_sync(0xffffffffu, count, offset);
    if (threadIdx.x % 32 == 0 && count > 0) atomicAdd(&bad[slot], count);
}

// scramble_*: rewrites every row of a [rows, HEAD_DIM] tensor in place through a signed column
// permutation: x[r][j] = ±x[r][src_j], code[j] = src_j | (negate << 16). Exact in every dtype (a
// permutation and sign flips). Applied between timed samples (outside the timed region): Q and K
// through one map (Q·Kᵀ is unchanged), V and the f32 reference through another (the output turns
// with V), so every timed launch sees inputs it has never seen and the reference still holds.
// One warp per row; the row is staged in shared memory.
extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
scramble_elem(unsigned short* __restrict__ x, long long rows, const int* __restrict__ code) {
    __shared__ unsigned short row_copy[ROWS_PER_BLOCK][HEAD_DIM];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * ROWS_PER_BLOCK + warp;
    if (r >= rows) return;
    unsigned short* row = x + r * HEAD_DIM;
    for (int d = lane; d < HEAD_DIM; d += 32) row_copy[warp][d] = row[d];
    __syncwarp();
    for (int d = lane; d < HEAD_DIM; d += 32) {
        const int c = code[d];
        row[d] = row_copy[warp][c & 0xffff] ^ ((c >> 16) ? 0x8000 : 0);
    }
}

// On the words' bits (a sign flip is an XOR of bit 31), so a masked reference turns exactly too:
// its rows are whole stored rows, and a row's mask is the same for every column.
extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
scramble_f32(unsigned int* __restrict__ x, long long rows, const int* __restrict__ code) {
    __shared__ unsigned int row_copy[ROWS_PER_BLOCK][HEAD_DIM];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * ROWS_PER_BLOCK + warp;
    if (r >= rows) return;
    unsigned int* row = x + r * HEAD_DIM;
    for (int d = lane; d < HEAD_DIM; d += 32) row_copy[warp][d] = row[d];
    __syncwarp();
    for (int d = lane; d < HEAD_DIM; d += 32) {
        const int c = code[d];
        row[d] = row_copy[warp][c & 0xffff] ^ ((c >> 16) ? 0x80000000u : 0u);
    }
}
