// The sm_80 tensor-core building blocks that mma.cu and decode.cu share: PTX wrappers (cp.async,
// ldmatrix, mma.sync m16n8k16), the XOR swizzle of a shared-memory tile of HEAD_DIM-element rows,
// and the per-lane ldmatrix addressing of its 16×16 blocks. The fragment layouts and why the
// swizzle is bank-conflict free: mma.cu's header.
#pragma once

#include "attn_common.cuh"

namespace mma_ptx {

typedef unsigned int u32;

// Bytes of one tile row, HEAD_DIM 2-byte elements: a function rather than a constant, since NVRTC
// writes every namespace-scope constant into the PTX (the kernels' own ROW_BYTES already is there).
__device__ __forceinline__ constexpr int row_bytes() { return HEAD_DIM * 2; }

// ---- PTX wrappers --------------------------------------------------------------------------------

// 16-byte async copy global -> shared, bypassing L1 (.cg). With src_bytes == 0 nothing is read from
// global memory and the 16 destination bytes are zero-filled: that is how tails are padded.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool in_range) {
    const int src_bytes = in_range ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `Pending` of this thread's most recent commit groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// volatile: the result depends on shared memory the compiler cannot see, so the load must stay
// between the barriers where it is written.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a · b on the tensor cores, f32 accumulation.
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(ATTN_DTYPE_BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Byte offset of logical 16-byte chunk `chunk` of row `row` inside a swizzled tile.
__device__ __forceinline__ u32 swizzled(int row, int chunk) {
    return static_cast<u32>(row * row_bytes() + ((chunk ^ (row & 7)) << 4));
}

// ---- per-lane ldmatrix addressing ----------------------------------------------------------------
//
// "A-style" lanes (Q and V): lane l addresses row (l & 15), chunk (l >> 4) of a 16×16 block, so
//   matrix 0 = rows 0-7 / cols 0-7, 1 = rows 8-15 / cols 0-7, 2 = rows 0-7 / cols 8-15, 3 = rows
//   8-15 / cols 8-15. For Q (A operand, rows = queries) that is exactly a0..a3. For V with .trans
//   (rows = keys = the k dimension of P·V, cols = head dim = n), lane (g, t) receives
//   V[2t..2t+1][g] of each matrix: matrices 0/1 are b0/b1 of head-dim n-tile 2p and 2/3 are b0/b1 of
//   n-tile 2p+1.
// "B-style" lanes (K): lane l addresses row (l & 7) + 8·(l >> 4), chunk (l >> 3) & 1, so matrix 0 =
//   keys 0-7 / dims 0-7, 1 = keys 0-7 / dims 8-15, 2 = keys 8-15 / dims 0-7, 3 = keys 8-15 / dims
//   8-15. Without .trans lane (g, t) receives K[g][2t..2t+1] = Kᵀ[2t..2t+1][g], i.e. b0 (matrices
//   0, 2) and b1 (matrices 1, 3) of key n-tiles 2p and 2p+1.
// Every 16-row block starts at a multiple of 8, so the swizzle key (row & 7) is just (l & 7). The
// chunk of k-step `step` is 2·step + c with c ∈ {0, 1}; writing 2·step = 8·hi + lo (lo ∈ {0,2,4,6}),
//   (2·step + c) ^ (l & 7) = 8·hi + ((lo + c) ^ (l & 7)),
// so each lane keeps just 4 offsets per style (one per lo) and everything else is an immediate:
// the addresses then cost no registers per (step, row block) pair.
struct LaneAddressing {
    // Per lane: the row offset of each style, the XOR key's even part (key & 6, as a chunk index)
    // and each style's odd chunk bit after the XOR. For the 16 · step + 16-byte chunk of a k-step,
    //   ((2·step + c) ^ key) = 8·hi + ((lo ^ (key & 6)) | (c ^ (key & 1)))   with 2·step = 8·hi + lo,
    // so one LOP3 per ldmatrix rebuilds the column offset: five registers instead of a table of eight.
    u32 a_row;  // A-style: (l & 15)·row_bytes() + 16·(a_c ^ (l & 1))
    u32 b_row;  // B-style: ((l & 7) + 8·(l >> 4))·row_bytes() + 16·(b_c ^ (l & 1))
    u32 key6;   // 16·(l & 6)

    __device__ __forceinline__ explicit LaneAddressing(int lane) {
        const int key = lane & 7;
        const int a_c = lane >> 4;
        const int b_c = (lane >> 3) & 1;
        a_row = static_cast<u32>((lane & 15) * row_bytes() + ((a_c ^ (key & 1)) << 4));
        b_row = static_cast<u32>(((lane & 7) + ((lane >> 4) << 3)) * row_bytes() + ((b_c ^ (key & 1)) << 4));
        key6 = static_cast<u32>((key & 6) << 4);
    }

    __device__ __forceinline__ u32 column(int step) const {
        return ((static_cast<u32>((2 * step) & 6) << 4) ^ key6) + static_cast<u32>((step >> 2) * 128);
    }
    // Address of this lane's row in the 16×16 block at (row0, 16·step) of a tile, A-style.
    // row0 and step are compile-time constants at every call site (unrolled loops).
    __device__ __forceinline__ u32 a(u32 tile, int row0, int step) const {
        return tile + a_row + column(step) + static_cast<u32>(row0 * row_bytes());
    }
    // Same, B-style.
    __device__ __forceinline__ u32 b(u32 tile, int row0, int step) const {
        return tile + b_row + column(step) + static_cast<u32>(row0 * row_bytes());
    }
};

}  // namespace mma_ptx
