// Shared definitions for every attention kernel in this folder (see README.md for the ABI).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#if defined(ATTN_DTYPE_BF16)
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ float to_float(elem_t x) { return __bfloat162float(x); }
__device__ __forceinline__ elem_t from_float(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ elem2_t from_float2(float a, float b) { return __floats2bfloat162_rn(a, b); }
#elif defined(ATTN_DTYPE_F16)
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ float to_float(elem_t x) { return __half2float(x); }
__device__ __forceinline__ elem_t from_float(float x) { return __float2half_rn(x); }
__device__ __forceinline__ elem2_t from_float2(float a, float b) { return __floats2half2_rn(a, b); }
#else
#error "define exactly one of ATTN_DTYPE_F16, ATTN_DTYPE_BF16"
#endif

#ifndef HEAD_DIM
#error "HEAD_DIM must be defined"
#endif

// NVRTC has no <math.h>: the float infinity, for masked scores and empty running maxima.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// log2(e): kernels fold it into the softmax scale so that exp(x) becomes exp2f(x * log2e).
#define ATTN_LOG2E 1.4426950408889634f

// The last key index (exclusive) that query row `row` may see under the bottom-right aligned causal
// mask: query i sees keys j <= i + seq_kv - seq_q. Can be <= 0 (a fully masked row).
__device__ __forceinline__ int causal_kv_end(int row, int seq_q, int seq_kv) {
    return row + 1 + seq_kv - seq_q;
}

// Device helpers the tensor-core kernels share. In a namespace so that a user's kernel
// (`--src`, which includes this header) may define its own functions of the same names.
namespace attn {

// Key limit (exclusive) of one query row: the causal bound, clipped to the keys that exist.
__device__ __forceinline__ int row_kv_limit(int row, int seq_q, int seq_kv, int causal) {
    return causal ? min(seq_kv, causal_kv_end(row, seq_q, seq_kv)) : seq_kv;
}

// ---- The variant parameters (README.md, "Variants"): GQA/MQA, sliding window, varlen. ----

// The first key (inclusive) query `row` may see: 0, or `row + seq_kv - seq_q - window_left` for a
// sliding window (window_left >= 0), clipped to [0, seq_kv].
__device__ __forceinline__ int row_kv_lo(int row, int seq_q, int seq_kv, int window_left) {
    return window_left < 0 ? 0 : min(seq_kv, max(0, row + seq_kv - seq_q - window_left));
}

// The last key (exclusive) query `row` may see: the causal bound (causal means window_right 0),
// `row + seq_kv - seq_q + 1 + window_right` for a window (window_right >= 0), clipped to
// [0, seq_kv]. A row with row_kv_lo >= row_kv_hi sees no key and writes zeros.
__device__ __forceinline__ int row_kv_hi(int row, int seq_q, int seq_kv, int causal, int window_right) {
    const int right = causal ? 0 : window_right;
    return right < 0 ? seq_kv : min(seq_kv, max(0, row + seq_kv - seq_q + 1 + right));
}

// Where one (sequence, query head)'s rows live. Dense: Q/O are [B, H, S_q, D] and K/V
// [B, H_kv, S_kv, D], rows D elements apart. Varlen (cu_seqlens_q != nullptr): Q/O are packed
// [total_q, H, D] and K/V [total_kv, H_kv, D], rows H·D (H_kv·D) apart, sequence b's rows
// cu_seqlens[b] .. cu_seqlens[b+1]. Query head h reads K/V head h / (heads / kv_heads).
struct HeadView {
    long long q;    // element offset of this head's row 0 in Q and O
    long long kv;   // element offset of its K/V head's row 0 in K and V
    int q_stride;   // elements between consecutive rows of Q and O
    int kv_stride;  // elements between consecutive rows of K and V
    int seq_q;      // this sequence's query rows
    int seq_kv;     // this sequence's keys
};

__device__ __forceinline__ HeadView head_view(int b, int h, int heads, int kv_heads, int seq_q, int seq_kv,
                                              const int* cu_seqlens_q, const int* cu_seqlens_kv) {
    HeadView view;
    const int kv_head = h / (heads / kv_heads);
    if (cu_seqlens_q == nullptr) {
        view.seq_q = seq_q;
        view.seq_kv = seq_kv;
        view.q_stride = HEAD_DIM;
        view.kv_stride = HEAD_DIM;
        view.q = ((long long)b * heads + h) * seq_q * HEAD_DIM;
        view.kv = ((long long)b * kv_heads + kv_head) * seq_kv * HEAD_DIM;
    } else {
        const int q0 = cu_seqlens_q[b], kv0 = cu_seqlens_kv[b];
        view.seq_q = cu_seqlens_q[b + 1] - q0;
        view.seq_kv = cu_seqlens_kv[b + 1] - kv0;
        view.q_stride = heads * HEAD_DIM;
        view.kv_stride = kv_heads * HEAD_DIM;
        view.q = ((long long)q0 * heads + h) * HEAD_DIM;
        view.kv = ((long long)kv0 * kv_heads + kv_head) * HEAD_DIM;
    }
    return view;
}

// The 32-bit shared-memory address of a generic pointer into shared memory (for PTX operands).
__device__ __forceinline__ unsigned int smem_addr(const void* p) {
    return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 2^x as one MUFU.EX2. exp2f without fast-math compiles to the non-ftz ex2, which adds denormal
// handling around it; flushing a denormal probability to 0 changes nothing here.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats -> one b32 holding two elements, `lo` in the low 16 bits (the lower column index).
__device__ __forceinline__ unsigned int pack_elem2(float lo, float hi) {
    elem2_t v = from_float2(lo, hi);
    return *reinterpret_cast<unsigned int*>(&v);
}

}  // namespace attn
