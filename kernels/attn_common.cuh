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
