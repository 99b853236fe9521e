// micro_hopper.cu — the `hopper` target of `cargo xtask micro`: hopper.cu's K/V pipeline alone,
// timed with clock64(), so that tile configs (BLOCK_M, BLOCK_N, NUM_WARPS, STAGES: hopper's knobs,
// same names, same meaning) can be ranked in seconds and seed a hopper search.
//
// What runs (one block; hopper.cu's header explains every piece, this file keeps them in step):
//   - one producer warpgroup (its first thread issues every TMA copy; the other warps leave): the
//     Q tile once (BLOCK_M rows), then TILES tiles of K and of V (BLOCK_N rows × HEAD_DIM each)
//     into a STAGES-deep ring, each completing on its slot's full mbarrier; before refilling a slot
//     it waits on the slot's empty mbarrier. 128-byte swizzle, 64-column boxes, as hopper's maps.
//   - NUM_WARPS / 4 consumer warpgroups (64 query rows each), per tile: wait for K, S = Q·Kᵀ
//     (wgmma m64n{BLOCK_N}k16 from shared memory), hopper's online softmax in registers (row max
//     with quad shuffles, one FFMA and one MUFU.EX2 per score, row sums, O rescaled), P packed into
//     A fragments, wait for V, O += P·V (wgmma m64n64k16, P from registers, V MN-major), wait, and
//     release the slot (every consumer thread arrives on its empty barrier). setmaxnreg moves
//     registers to the consumers as hopper does.
//   That is hopper's OVERLAP 0, PINGPONG 0 loop without masking or epilogue: STAGES = 1 (a ring of
//   one, load and compute in turn) is allowed here as the unpipelined reference.
//   Tile t of block b reads keys ((b · 7 + t) mod (S_kv / BLOCK_N)) · BLOCK_N onward of head 0, so
//   that every block streams the same L2-resident K and V from different places, as the row
//   blocks of one head do in attention.
// What it reports: consumer thread 0 reads clock64() after the barriers are initialised and again
//   once every consumer warp is past its last tile (a named barrier); block b writes those cycles
//   as the b-th 64-bit word of O. Nothing else of O is meaningful.
// What it leaves out (micro's scope, stated in its evidence): causal masking and skipping,
//   FA3's intra-warpgroup overlap (OVERLAP) and ping-pong (PINGPONG), the output epilogue, grids
//   of many heads and waves.
//
// Launch (a `--src` kernel with the TensorMaps ABI, kernels/README.md): defines TENSOR_MAPS=1 (the
// host appends the maps of Q, K, V with boxes of BLOCK_M / BLOCK_N rows), PRODUCER_WARPS=4 (block
// = (NUM_WARPS + 4) · 32 threads), SHARED_BYTES = 1024 + BLOCK_M · HEAD_DIM · 2 + STAGES · 2 ·
// BLOCK_N · HEAD_DIM · 2 (hopper's formula) and TILES; grid = S_q / BLOCK_M blocks, S_kv a multiple
// of BLOCK_N. Compiled for compute_90a only (wgmma, TMA, setmaxnreg).

#include "attn_common.cuh"

#ifndef NUM_WARPS
#define NUM_WARPS 8
#endif
#ifndef BLOCK_M
#define BLOCK_M (16 * NUM_WARPS)
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef TILES
#define TILES 64
#endif

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "micro_hopper.cu: HEAD_DIM must be 64 or 128");
static_assert(NUM_WARPS == 4 || NUM_WARPS == 8 || NUM_WARPS == 12, "micro_hopper.cu: NUM_WARPS (consumer warps) must be 4, 8 or 12");
static_assert(NUM_WARPS != 12 || HEAD_DIM == 64, "micro_hopper.cu: NUM_WARPS 12 needs HEAD_DIM 64");
static_assert(BLOCK_M == 16 * NUM_WARPS, "micro_hopper.cu: BLOCK_M must equal 64 * (NUM_WARPS / 4)");
static_assert(BLOCK_N == 64 || BLOCK_N == 128, "micro_hopper.cu: BLOCK_N must be 64 or 128");
static_assert(STAGES >= 1 && STAGES <= 4, "micro_hopper.cu: STAGES must be 1 to 4");
static_assert(TILES >= 1, "micro_hopper.cu: TILES must be positive");
static_assert(sizeof(elem_t) == 2, "micro_hopper.cu: 16-bit elements expected");

#if defined(ATTN_DTYPE_BF16)
#define MICRO_WGMMA_TYPE "bf16"
#else
#define MICRO_WGMMA_TYPE "f16"
#endif

// The driver's CUtensorMap (cuda.h, not available to NVRTC): 128 opaque bytes, 64-byte aligned.
struct alignas(64) MicroTensorMap {
    unsigned long long opaque[16];
};

namespace micro_hopper {
using attn::exp2_ftz;
using attn::pack_elem2;
using attn::smem_addr;

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr int D = HEAD_DIM;
constexpr int WARPGROUPS = NUM_WARPS / 4;
constexpr int CONSUMER_THREADS = NUM_WARPS * 32;
constexpr int THREADS = CONSUMER_THREADS + 128;
constexpr int PANELS = D / 64;
constexpr int Q_TILE_BYTES = BLOCK_M * D * 2;
constexpr int KV_TILE_BYTES = BLOCK_N * D * 2;
constexpr int QK_K_STEPS = D / 16;
constexpr int PV_K_STEPS = BLOCK_N / 16;
constexpr int S_REGS = BLOCK_N / 2;
constexpr int S_CHUNKS = BLOCK_N / 8;
#if NUM_WARPS == 8
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
#elif NUM_WARPS == 12
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 160;
#endif

#define MICRO_NEG_INF __int_as_float(0xff800000u)

// ---- hopper.cu's PTX wrappers and per-tile steps (copied; keep in step) --------------------------

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the copy engine completes on them).
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives (one of the barrier's arrivals) and announces `bytes` of transactions for this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// One box of a 3-D tensor map (coordinates innermost first: column, row, batch·head) into shared
// memory at `dst`, completing `bytes` of transactions on `bar`. Out-of-range rows read as zeros.
__device__ __forceinline__ void tma_load_3d(u32 dst, const MicroTensorMap* map, int c0, int c1, int c2, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const MicroTensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Named barrier over the `threads` threads (whole warps) that use barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most `Pending` of this thread's most recent wgmma groups are still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// Pins the accumulator registers in place: the compiler may not move their reads or writes across
// this point (it does not know that wgmma writes them asynchronously).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N>
__device__ __forceinline__ void fence_regs(u32 (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4), and
// the 128-byte swizzle mode (1 in bits 62-63). Base offset 0: every atom is 1024-byte aligned.
__device__ __forceinline__ u64 make_desc(u32 addr, u32 leading_bytes, u32 stride_bytes) {
    return static_cast<u64>((addr >> 4) & 0x3FFFu) | (static_cast<u64>((leading_bytes >> 4) & 0x3FFFu) << 16) |
           (static_cast<u64>((stride_bytes >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

// d (+)= A·B, m64n64k16: A (64×16) and B (16×64) from shared memory, both K-major (trans 0).
// scale_d == 0 ignores d's old value (the first k-step of a fresh accumulator).
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." MICRO_WGMMA_TYPE "." MICRO_WGMMA_TYPE " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A·B, m64n128k16: A (64×16) and B (16×128) from shared memory, both K-major (trans 0).
// scale_d == 0 ignores d's old value (the first k-step of a fresh accumulator).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." MICRO_WGMMA_TYPE "." MICRO_WGMMA_TYPE " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A·B, m64n64k16: A (64×16) from registers (the mma.sync m16n8k16 A fragment per warp),
// B (16×64) from shared memory, MN-major (trans-b 1: N contiguous in memory).
__device__ __forceinline__ void wgmma_rs_n64_tb(float (&d)[32], const u32 (&a)[4], u64 desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." MICRO_WGMMA_TYPE "." MICRO_WGMMA_TYPE " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// Issues S = Q·Kᵀ for the warpgroup's 64 rows (HEAD_DIM / 16 wgmma, one commit group). The caller
// waits for the group before reading s_acc.
__device__ __forceinline__ void issue_qk(float (&s_acc)[S_REGS], u32 q_rows, u32 k_tile) {
    fence_regs(s_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_K_STEPS; ++kk) {
        const u32 in_panel = (kk & 3) * 32;  // 16 columns = 32 bytes along the 128-byte row
        const u64 desc_q = make_desc(q_rows + (kk >> 2) * BLOCK_M * 128 + in_panel, 16, 1024);
        const u64 desc_k = make_desc(k_tile + (kk >> 2) * BLOCK_N * 128 + in_panel, 16, 1024);
#if BLOCK_N == 128
        wgmma_ss_n128(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#else
        wgmma_ss_n64(s_acc, desc_q, desc_k, kk > 0 ? 1 : 0);
#endif
    }
    wgmma_commit();
}

// Pins O and P and orders their last register writes before the wgmma that follow.
__device__ __forceinline__ void fence_pv_operands(float (&o_acc)[PANELS][32], u32 (&p_frag)[PV_K_STEPS][4]) {
#pragma unroll
    for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk) fence_regs(p_frag[kk]);
    wgmma_fence();
}

// The P·V descriptors of a V tile: k-step kk starts 16 keys (2048 bytes) further, panel p
// BLOCK_N rows further.
__device__ __forceinline__ void pv_descs(u32 v_tile, u64 (&desc_v)[PV_K_STEPS][PANELS]) {
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) desc_v[kk][p] = make_desc(v_tile + p * BLOCK_N * 128 + kk * 2048, 1024, 1024);
}

__device__ __forceinline__ void issue_pv(float (&o_acc)[PANELS][32], u32 (&p_frag)[PV_K_STEPS][4],
                                         const u64 (&desc_v)[PV_K_STEPS][PANELS]) {
    fence_pv_operands(o_acc, p_frag);
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk)
#pragma unroll
        for (int p = 0; p < PANELS; ++p) wgmma_rs_n64_tb(o_acc[p], p_frag[kk], desc_v[kk][p], 1);
    wgmma_commit();
}

// The probabilities as A fragments of P·V: k-step kk is S chunks 2kk (a0 row g, a1 row g + 8) and
// 2kk + 1 (a2, a3).
__device__ __forceinline__ void pack_p(const float (&s_acc)[S_REGS], u32 (&p_frag)[PV_K_STEPS][4]) {
#pragma unroll
    for (int kk = 0; kk < PV_K_STEPS; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float* s = &s_acc[4 * (2 * kk + half)];
            p_frag[kk][2 * half] = pack_elem2(s[0], s[1]);
            p_frag[kk][2 * half + 1] = pack_elem2(s[2], s[3]);
        }
    }
}

__device__ __forceinline__ void rescale_o(float (&o_acc)[PANELS][32], const float (&rescale)[2]) {
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                o_acc[p][4 * i + 2 * h] *= rescale[h];
                o_acc[p][4 * i + 2 * h + 1] *= rescale[h];
            }
}

// hopper.cu's online softmax of one S tile, without its causal mask: running max (scale·log2e
// domain, quad shuffles), exp2 of every score, running sums, and O's rescale factor.
__device__ __forceinline__ void softmax_scores(float (&s_acc)[S_REGS], float scale_log2, float (&row_max)[2],
                                               float (&row_sum)[2], float (&rescale)[2]) {
    fence_regs(s_acc);
    float neg_max[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m = MICRO_NEG_INF;
#pragma unroll
        for (int n = 0; n < S_CHUNKS; ++n) m = fmaxf(m, fmaxf(s_acc[4 * n + 2 * h], s_acc[4 * n + 2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        m = fmaxf(row_max[h], m * scale_log2);
        const float max_used = m == MICRO_NEG_INF ? 0.f : m;
        rescale[h] = exp2_ftz(row_max[h] - max_used);
        row_max[h] = m;
        neg_max[h] = -max_used;
    }
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int n = 0; n < S_CHUNKS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float& s = s_acc[4 * n + e];
            s = exp2_ftz(fmaf(s, scale_log2, neg_max[e >> 1]));
            sum[e >> 1][e & 1] += s;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * rescale[h] + (sum[h][0] + sum[h][1]);
}

struct Barriers {
    u64 q_full;
    u64 k_full[STAGES];
    u64 v_full[STAGES];
    u64 empty[STAGES];
};

// The producer thread: Q, then tile t of K and V into slot t % STAGES once the consumers have
// released the slot's previous round (hopper.cu's produce, with the micro's tile addresses).
__device__ __forceinline__ void produce(Barriers& bars, u32 q_tile, u32 k_tiles, u32 v_tiles,
                                        const MicroTensorMap* map_q, const MicroTensorMap* map_k,
                                        const MicroTensorMap* map_v, int m0, int first_tile, int kv_tiles) {
    const u32 q_full = smem_addr(&bars.q_full);
    mbar_arrive_expect_tx(q_full, Q_TILE_BYTES);
#pragma unroll
    for (int p = 0; p < PANELS; ++p) tma_load_3d(q_tile + p * BLOCK_M * 128, map_q, 64 * p, m0, 0, q_full);
    int slot = 0;
    u32 phase = 0;
    for (int t = 0; t < TILES; ++t) {
        if (t >= STAGES) mbar_wait(smem_addr(&bars.empty[slot]), phase ^ 1);
        const int row = ((first_tile + t) % kv_tiles) * BLOCK_N;
        const u32 k_full = smem_addr(&bars.k_full[slot]);
        const u32 v_full = smem_addr(&bars.v_full[slot]);
        const u32 k_dst = k_tiles + slot * KV_TILE_BYTES;
        const u32 v_dst = v_tiles + slot * KV_TILE_BYTES;
        mbar_arrive_expect_tx(k_full, KV_TILE_BYTES);
#pragma unroll
        for (int p = 0; p < PANELS; ++p) tma_load_3d(k_dst + p * BLOCK_N * 128, map_k, 64 * p, row, 0, k_full);
        mbar_arrive_expect_tx(v_full, KV_TILE_BYTES);
#pragma unroll
        for (int p = 0; p < PANELS; ++p) tma_load_3d(v_dst + p * BLOCK_N * 128, map_v, 64 * p, row, 0, v_full);
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
        }
    }
}

}  // namespace micro_hopper

extern "C" __global__ void __launch_bounds__(micro_hopper::THREADS, 1)
    attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
             elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
             const __grid_constant__ MicroTensorMap map_q, const __grid_constant__ MicroTensorMap map_k,
             const __grid_constant__ MicroTensorMap map_v) {
    using namespace micro_hopper;
    (void)q;  // read through the maps
    (void)k;
    (void)v;
    (void)batch;
    (void)heads;
    (void)seq_q;
    (void)causal;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ Barriers bars;
    const u32 raw_addr = smem_addr(smem_raw);
    const u32 base = (raw_addr + 1023u) & ~1023u;
    const u32 q_tile = base;
    const u32 k_tiles = q_tile + Q_TILE_BYTES;
    const u32 v_tiles = k_tiles + STAGES * KV_TILE_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int m0 = blockIdx.x * BLOCK_M;
    const int kv_tiles = max(seq_kv / BLOCK_N, 1);

    if (tid == CONSUMER_THREADS) {
        prefetch_tensor_map(&map_q);
        prefetch_tensor_map(&map_k);
        prefetch_tensor_map(&map_v);
        mbar_init(smem_addr(&bars.q_full), 1);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_addr(&bars.k_full[s]), 1);
            mbar_init(smem_addr(&bars.v_full[s]), 1);
            mbar_init(smem_addr(&bars.empty[s]), CONSUMER_THREADS);
        }
        fence_barrier_init();
    }
    __syncthreads();
    const long long start = clock64();

    if (warp >= NUM_WARPS) {
#if NUM_WARPS >= 8
        setmaxnreg_dec<PRODUCER_REGS>();
#endif
        if (warp == NUM_WARPS && lane == 0)
            produce(bars, q_tile, k_tiles, v_tiles, &map_q, &map_k, &map_v, m0, blockIdx.x * 7, kv_tiles);
        return;
    }

#if NUM_WARPS >= 8
    setmaxnreg_inc<CONSUMER_REGS>();
#endif
    const int wg = warp >> 2;
    const float scale_log2 = scale * ATTN_LOG2E;
    const u32 q_rows = q_tile + wg * 64 * 128;  // this warpgroup's 64 rows of every Q panel

    float o_acc[PANELS][32];
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o_acc[p][i] = 0.f;
    float row_max[2] = {MICRO_NEG_INF, MICRO_NEG_INF};
    float row_sum[2] = {0.f, 0.f};
    u32 p_frag[PV_K_STEPS][4];
    float rescale[2];

    mbar_wait(smem_addr(&bars.q_full), 0);
    int slot = 0;
    u32 phase = 0;
    for (int t = 0; t < TILES; ++t) {
        const u32 k_tile = k_tiles + slot * KV_TILE_BYTES;
        const u32 v_tile = v_tiles + slot * KV_TILE_BYTES;
        float s_acc[S_REGS];
        mbar_wait(smem_addr(&bars.k_full[slot]), phase);
        issue_qk(s_acc, q_rows, k_tile);
        wgmma_wait<0>();
        softmax_scores(s_acc, scale_log2, row_max, row_sum, rescale);
        pack_p(s_acc, p_frag);
        rescale_o(o_acc, rescale);
        u64 desc_v[PV_K_STEPS][PANELS];
        pv_descs(v_tile, desc_v);
        mbar_wait(smem_addr(&bars.v_full[slot]), phase);
        issue_pv(o_acc, p_frag, desc_v);
        wgmma_wait<0>();
#pragma unroll
        for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
        mbar_arrive(smem_addr(&bars.empty[slot]));
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
        }
    }
    named_barrier_sync(1, CONSUMER_THREADS);  // every consumer warp is past its last tile
    if (tid == 0) reinterpret_cast<long long*>(o)[blockIdx.x] = clock64() - start;
    // Keeps the softmax sums alive: a store the compiler cannot prove never happens (past the
    // cycle words).
    if (o_acc[0][0] + row_sum[0] + row_sum[1] == 1234.5678f) o[4 * gridDim.x + blockIdx.x] = from_float(o_acc[0][1]);
}
