// micro.cu — the `cp-async` target of `cargo xtask micro`: the K/V pipeline of `mma` and `tiled`
// (a cp.async ring of key tiles) alone, timed with clock64(), so that tile configs (BLOCK_N,
// NUM_WARPS, STAGES: mma's knobs, same names) can be ranked in seconds and seed an mma search.
// Shaped like an attention kernel so that it launches through the plain ABI (kernels/README.md):
// K and V are the streamed tensors, and O receives one 64-bit clock64() cycle count per block.
//
// Each block streams TILES key tiles; tile t is BLOCK_N rows × HEAD_DIM of K and the same of V
// (keys ((b · 7 + t) mod (S_kv / BLOCK_N)) · BLOCK_N onward, so that every block streams the same
// L2-resident K and V from different places), through a STAGES-deep ring of shared-memory buffers
// (cp.async with VEC_WIDTH-byte copies, one commit group per tile; STAGES = 1 is a plain load,
// wait, compute loop), and does one FMA per element of both tiles. The loop is timed with clock64()
// on thread 0. Dynamic shared memory: STAGES · 2 · BLOCK_N · HEAD_DIM · 2 bytes.
// What it measures: load/pipeline throughput of a key-tile shape and ring depth. What it does not:
// the tensor-core GEMMs, softmax, register pressure or the occupancy of a real attention kernel
// (it runs one block per SM).
#include "attn_common.cuh"

#ifndef BLOCK_N
#define BLOCK_N 64
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

static_assert(STAGES >= 1, "micro.cu: STAGES must be positive");
static_assert(VEC_WIDTH == 4 || VEC_WIDTH == 8 || VEC_WIDTH == 16, "micro.cu: VEC_WIDTH must be 4, 8 or 16");
static_assert(HEAD_DIM * 2 % VEC_WIDTH == 0, "micro.cu: a row must split into VEC_WIDTH-byte copies");

#define THREADS (NUM_WARPS * 32)
#define TILE_ELEMS (BLOCK_N * HEAD_DIM)
#define VEC_ELEMS (VEC_WIDTH / 2)

__device__ __forceinline__ void copy_async(void* smem, const void* gmem) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
#if VEC_WIDTH == 16
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem), "n"(VEC_WIDTH));
#endif
}

// The K and V tiles of one key tile into one stage of the ring, as one commit group.
__device__ __forceinline__ void load_tile(elem_t* stage, const elem_t* k_src, const elem_t* v_src) {
    for (int i = threadIdx.x * VEC_ELEMS; i < TILE_ELEMS; i += THREADS * VEC_ELEMS) {
        copy_async(stage + i, k_src + i);
        copy_async(stage + TILE_ELEMS + i, v_src + i);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch,
                                    int heads, int seq_q, int seq_kv, float scale, int causal) {
    (void)q;
    (void)batch;
    (void)heads;
    (void)seq_q;
    (void)causal;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    elem_t* ring = reinterpret_cast<elem_t*>(smem_raw);
    const size_t block = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const int kv_tiles = max(seq_kv / BLOCK_N, 1);
    auto offset = [&](int t) { return (size_t)((block * 7 + t) % kv_tiles) * TILE_ELEMS; };
    auto stage = [&](int t) { return ring + (t % STAGES) * 2 * TILE_ELEMS; };

    float acc = 0.0f;
    __syncthreads();
    const long long start = clock64();
    for (int s = 0; s < STAGES - 1 && s < TILES; ++s) load_tile(stage(s), k + offset(s), v + offset(s));
    for (int t = 0; t < TILES; ++t) {
        const int next = t + STAGES - 1;
        if (next < TILES) load_tile(stage(next), k + offset(next), v + offset(next));
        else asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1));
        __syncthreads();
        const elem_t* tile = stage(t);
        // One FMA per element of the K and V tiles, spread over the block.
        for (int i = threadIdx.x; i < 2 * TILE_ELEMS; i += THREADS) acc = fmaf(to_float(tile[i]), scale, acc);
        __syncthreads();
    }
    const long long cycles = clock64() - start;
    if (threadIdx.x == 0) reinterpret_cast<long long*>(o)[block] = cycles;
    // Keeps the FMAs alive: a store the compiler cannot prove never happens (past the cycle words).
    if (acc == 1234.5678f) o[4 * gridDim.x * gridDim.y * gridDim.z + block] = from_float(acc);
}
