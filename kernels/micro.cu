// Micro-benchmark of one tile configuration (`cargo xtask micro`), shaped like an attention kernel
// so that it launches through the same ABI (kernels/README.md): the K tensor is the stream of
// tiles, and O receives one 64-bit clock64() cycle count per block instead of attention output.
//
// Each block streams TILES tiles of BLOCK_M x BLOCK_K 16-bit elements from global memory through
// a STAGES-deep ring of shared-memory buffers (cp.async with VEC_WIDTH-byte copies; STAGES = 1 is
// a plain load, wait, compute loop), and does BLOCK_M x BLOCK_K FMAs per tile. The loop is timed
// with clock64() on thread 0. Dynamic shared memory: STAGES * BLOCK_M * BLOCK_K * 2 bytes.
// What it measures: load/pipeline throughput of a tile shape. What it does not: softmax, register
// pressure, tensor cores or occupancy of a real attention kernel.
#include "attn_common.cuh"

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_K
#define BLOCK_K 64
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef VEC_WIDTH
#define VEC_WIDTH 16
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef TILES
#define TILES 64
#endif

#define THREADS (NUM_WARPS * 32)
#define TILE_ELEMS (BLOCK_M * BLOCK_K)
#define VEC_ELEMS (VEC_WIDTH / 2)

__device__ __forceinline__ void copy_async(void* smem, const void* gmem) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
#if VEC_WIDTH == 16
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem), "n"(VEC_WIDTH));
#endif
}

__device__ __forceinline__ void load_tile(elem_t* buf, const elem_t* src) {
    for (int i = threadIdx.x * VEC_ELEMS; i < TILE_ELEMS; i += THREADS * VEC_ELEMS) copy_async(buf + i, src + i);
    asm volatile("cp.async.commit_group;\n" ::);
}

extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch,
                                    int heads, int seq_q, int seq_kv, float scale, int causal) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    elem_t* ring = reinterpret_cast<elem_t*>(smem_raw);
    const size_t total = (size_t)batch * heads * seq_kv * HEAD_DIM;
    const size_t block = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const size_t span = total > TILE_ELEMS ? (total - TILE_ELEMS) / VEC_ELEMS : 1;
    auto tile_src = [&](int t) { return k + ((block * TILES + t) * 977 % span) * VEC_ELEMS; };

    float acc = 0.0f;
    __syncthreads();
    const long long start = clock64();
    for (int s = 0; s < STAGES - 1 && s < TILES; ++s) load_tile(ring + s * TILE_ELEMS, tile_src(s));
    for (int t = 0; t < TILES; ++t) {
        const int next = t + STAGES - 1;
        if (next < TILES) load_tile(ring + (next % STAGES) * TILE_ELEMS, tile_src(next));
        else asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1));
        __syncthreads();
        const elem_t* tile = ring + (t % STAGES) * TILE_ELEMS;
        // BLOCK_M x BLOCK_K FMAs per tile, spread over the block.
        for (int i = threadIdx.x; i < TILE_ELEMS; i += THREADS) acc = fmaf(to_float(tile[i]), scale, acc);
        __syncthreads();
    }
    const long long cycles = clock64() - start;
    if (threadIdx.x == 0) reinterpret_cast<long long*>(o)[block] = cycles;
    // Keeps the FMAs alive: a store the compiler cannot prove never happens.
    if (acc == 1234.5678f) o[block * 4 + 1] = from_float(acc);
}
