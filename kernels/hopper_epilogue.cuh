// hopper_epilogue.cuh — the end of hopper.cu's work items: the Q tile's hand-back to the producer
// (q_empty) or to the copy warp (o_full), the stream-K tail's merge of a cut item's two partial
// results, O's normalisation and stores (store_o: from the accumulators, or staged in the
// warpgroup's Q rows with stmatrix and written with 16-byte stores), and the copy warp, which
// stores a staged O tile with TMA (O_TMA_STORE). A part of hopper.cu, included inside namespace
// hopper_attn after ConsumerItem and RowState: not a standalone header.
//
// Ordering: a consumer thread's generic-proxy accesses of a Q tile (its staged O, its Q fragments)
// are ordered before the producer's next TMA write into it by a fence.proxy.async before its
// arrival (release_q_tile, hand_o_tile); the copy warp gives a tile back only once its TMA store
// has read it (cp.async.bulk.wait_group.read), and waits for every store's writes before the block
// exits. Staged rows are overwritten only after the warpgroup's named barrier (all four warps past
// their last wgmma, which read all 64 Q rows).

#if SCHEDULE
// A consumer thread's release of the Q tile (q_empty) to the producer, which copies the next
// item's Q into it: this thread's generic-proxy accesses of the tile ordered before that TMA write.
__device__ __forceinline__ void release_q_tile(Barriers& bars, int buffer) {
    fence_proxy_async_shared();
    mbar_arrive(smem_addr(&bars.q_empty[buffer]));
}

#if O_TMA_STORE
// A consumer thread's hand-over of Q buffer `buffer`, its O rows staged there, to the copy warp
// (o_full): release_q_tile's fence and arrival on the copy warp's barrier (written out: through a
// shared helper NVVM reordered the tuned kernel's PTX), after the `writer` thread has said whether
// the copy warp stores the tile (o_whole).
__device__ __forceinline__ void hand_o_tile(Barriers& bars, int buffer, bool copied, bool writer) {
    if (writer) bars.o_whole[buffer] = copied ? 1 : 0;
    fence_proxy_async_shared();
    mbar_arrive(smem_addr(&bars.o_full[buffer]));
}
#endif
#endif

#if O_TMA_STORE
// Whether the copy warp stores the item's O tile (every row of it in the sequence; with STREAM_K the
// item whole, as a cut item's rows are stored by whichever of its two runs ends last). Uniform per
// block and item: both warpgroups stage their rows either way.
__device__ __forceinline__ bool o_tile_copied(const ConsumerItem& item) {
#if STREAM_K
    if (item.split != SPLIT_WHOLE) return false;
#endif
    return item.m0 + BLOCK_M <= item.len_q;
}
#endif

#if STREAM_K
// ---- the stream-K merge (STREAM_K 1: hopper_schedule.cuh, "the stream-K tail") --------------------

// The workspace's flags and partials (kernels/README.md: the persistent kernel's words).
__device__ __forceinline__ unsigned int* split_flags(unsigned int* words) { return words + 2; }
__device__ __forceinline__ float* split_partials(unsigned int* words) {
    const unsigned int flags_end = 2u + gridDim.x * NUM_WARPS;
    return reinterpret_cast<float*>(words + ((flags_end + 63u) & ~63u));  // 256-byte aligned
}

// a · x + b · y rounded the same whichever segment is a (no FMA contraction): the two segments
// finish in either order, and the output must not depend on which.
__device__ __forceinline__ float merged(float a, float x, float b, float y) {
    return __fadd_rn(__fmul_rn(a, x), __fmul_rn(b, y));
}

// A cut item's segment, at the end of its key loop: merges this warp's partial with the other
// segment's. Returns whether this warp stores the rows (false: it left its partial to the other).
__device__ __forceinline__ bool merge_split(float (&o_acc)[PANELS][32], float (&row_max)[2], float (&row_sum)[2],
                                            int kind, unsigned int* words, int warp, int lane) {
    // The cut between clusters c and c + 1 is named by the tail's block (the same rank).
    const unsigned int cut = kind == SPLIT_HEAD ? blockIdx.x + CLUSTER : blockIdx.x;
    unsigned int* flag = split_flags(words) + cut * NUM_WARPS + warp;
    float* partial = split_partials(words) + static_cast<size_t>(cut) * CONSUMER_THREADS * PARTIAL_WORDS +
                     warp * 32 + lane;
    unsigned int arrived = 0;
    if (lane == 0) arrived = atomicAdd(flag, 1u);
    arrived = __shfl_sync(0xffffffffu, arrived, 0);
    if (arrived == 0) {
        // First: leave the partial (0 -> 1 on arrival, 2 once written; the other's arrival adds 1).
#pragma unroll
        for (int p = 0; p < PANELS; ++p)
#pragma unroll
            for (int i = 0; i < 32; ++i) __stcg(partial + (p * 32 + i) * CONSUMER_THREADS, o_acc[p][i]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            __stcg(partial + (PANELS * 32 + h) * CONSUMER_THREADS, row_max[h]);
            __stcg(partial + (PANELS * 32 + 2 + h) * CONSUMER_THREADS, row_sum[h]);
        }
        __threadfence();
        __syncwarp();
        if (lane == 0) atomicAdd(flag, 1u);
        return false;
    }
    // Second: the first warp is writing (or has written) its partial; wait for the flag's 3.
    if (lane == 0) {
        while (atomicAdd(flag, 0u) != 3u) __nanosleep(64);
        atomicExch(flag, 0u);  // left zero for the next launch
    }
    __syncwarp();
    __threadfence();
    float scale_mine[2];
    float scale_theirs[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float m_theirs = __ldcg(partial + (PANELS * 32 + h) * CONSUMER_THREADS);
        const float l_theirs = __ldcg(partial + (PANELS * 32 + 2 + h) * CONSUMER_THREADS);
        const float m = fmaxf(row_max[h], m_theirs);
        const float used = m == HOPPER_NEG_INF ? 0.f : m;  // no key on either side: keep NaN out
        scale_mine[h] = exp2_ftz(row_max[h] - used);
        scale_theirs[h] = exp2_ftz(m_theirs - used);
        row_max[h] = m;
        row_sum[h] = merged(row_sum[h], scale_mine[h], l_theirs, scale_theirs[h]);
    }
#pragma unroll
    for (int p = 0; p < PANELS; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int h = (i >> 1) & 1;  // registers 4c, 4c + 1: row g; 4c + 2, 4c + 3: row g + 8
            o_acc[p][i] = merged(o_acc[p][i], scale_mine[h], __ldcg(partial + (p * 32 + i) * CONSUMER_THREADS),
                                 scale_theirs[h]);
        }
    return true;
}
#endif

// The reciprocals of rows g and g + 8's full sums (a quad's four partial sums), 0 for a row that
// saw no key (it writes zeros).
__device__ __forceinline__ void row_reciprocals(const float (&row_sum)[2], float (&inv_l)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv_l[h] = l > 0.f ? 1.f / l : 0.f;
    }
}

// The epilogue of this thread's rows of `item`: O normalised by `inv_l` and stored (where `store`
// says), straight from the accumulators or staged in the warpgroup's Q rows.
__device__ __forceinline__ void store_o(const ConsumerItem& item, const float (&o_acc)[PANELS][32], const float (&inv_l)[2],
                                        bool store, int wg, int warp_row0, int g, int t, int lane) {
    const int m0 = item.m0;
    const int len_q = item.len_q;
#if (Q_REGS || Q_RELEASE) && SCHEDULE
    // ---- epilogue: full row sums, guarded 1/l, 4-byte stores straight from the accumulators --------
    // (the Q tile may already hold the next item's Q). A quad's four lanes write 16 contiguous bytes of
    // a row per chunk.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp_row0 + g + 8 * h;
        if (store && row < len_q) {  // never a row past the sequence (varlen: the next sequence's)
            elem_t* out = item.o_head + static_cast<long long>(row) * item.o_stride + 2 * t;
#pragma unroll
            for (int p = 0; p < PANELS; ++p)
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    *reinterpret_cast<elem2_t*>(out + 64 * p + 8 * i) =
                        from_float2(o_acc[p][4 * i + 2 * h] * inv_l[h], o_acc[p][4 * i + 2 * h + 1] * inv_l[h]);
        }
    }
#else
    // ---- epilogue: full row sums, guarded 1/l, staged in the warpgroup's Q rows, 16-byte stores ------
    unsigned char* const smem = item.q_smem;
    // Every warp of the warpgroup is past its last wgmma (which read all 64 Q rows) before any
    // overwrites them.
    named_barrier_sync(1 + wg, 128);
    // The staging addresses are those load_q_frag read Q's fragments from: computed from an opaque
    // copy of the warp's first row, they are computed again here rather than held across the key
    // loop (with Q in registers the persistent loop spilled them). A multiple of 16 (the
    // mask says so to the compiler: a row's swizzle is then its offset in the warp's rows).
    int stage_row0 = warp_row0;
    asm volatile("" : "+r"(stage_row0));
    stage_row0 &= ~15;
    // stmatrix: per instruction four 8×8 matrices, O's rows g and g + 8 (h) of 8-column chunks i
    // and i + 1 of a panel; lane l addresses row l % 8 of matrix l / 8 = (h, i + ...) = (m & 1, m >> 1),
    // a 16-byte chunk of the swizzled tile. A quarter of the stores 4-byte ones took.
    const int stage_row = stage_row0 + 8 * ((lane >> 3) & 1) + (lane & 7);
    const u32 stage_base = smem_addr(smem);
#pragma unroll
    for (int p = 0; p < PANELS; ++p) {
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const int col = 64 * p + 8 * (i + (lane >> 4));
            const u32 addr = stage_base + tile_offset(BLOCK_M, stage_row, col);
            const float* lo = &o_acc[p][4 * i];      // chunk i: rows g (0, 1) and g + 8 (2, 3)
            const float* hi = &o_acc[p][4 * i + 4];  // chunk i + 1
            stmatrix_x4(addr, pack_elem2(lo[0] * inv_l[0], lo[1] * inv_l[0]),
                        pack_elem2(lo[2] * inv_l[1], lo[3] * inv_l[1]), pack_elem2(hi[0] * inv_l[0], hi[1] * inv_l[0]),
                        pack_elem2(hi[2] * inv_l[1], hi[3] * inv_l[1]));
        }
    }
#if O_TMA_STORE
    // The copy warp stores a whole item's tile (o_tile_copied); the consumers store the rest.
    if (o_tile_copied(item)) return;
#endif
    __syncwarp();  // each warp reads back only its own 16 staged rows
    constexpr int CHUNKS = D / 8;                          // 16-byte chunks per row
    constexpr int OUT_CHUNKS_PER_LANE = 16 * CHUNKS / 32;  // 16-byte chunks of the warp's rows per lane
#pragma unroll
    for (int i = 0; i < OUT_CHUNKS_PER_LANE; ++i) {
        const int idx = lane + i * 32;
        const int row = stage_row0 + idx / CHUNKS;
        const int col = (idx % CHUNKS) * 8;
        if (store && m0 + row < len_q) {  // never a row past the sequence (varlen: the next sequence's)
            const uint4 value = *reinterpret_cast<const uint4*>(smem + tile_offset(BLOCK_M, row, col));
            *reinterpret_cast<uint4*>(item.o_head + static_cast<long long>(m0 + row) * item.o_stride + col) = value;
        }
    }
#endif
}

#if O_TMA_STORE
// ---- the copy warp (O_TMA_STORE) ------------------------------------------------------------------
//
// One thread of the producer warpgroup's second warp follows the consumers item by item: once they
// have staged an item's O in its Q buffer (o_full), it stores the tile with TMA (one box per
// 64-column panel, through the O map: Q's boxes of the O tensor) where the consumers say the tile is
// whole (o_whole), waits until the copy has read the buffer, and gives the buffer back to the
// producer (q_empty, its one arrival). The consumers thus go on to their next item without O's
// read-back, its 16-byte stores and their addresses, and the stores run beside that item. Its last
// wait covers the global writes too, before the block exits.
__device__ __forceinline__ void copy_o_tiles(Barriers& bars, u32 q_tile, const HopperTensorMap* map_o, int heads,
                                             int kv_heads, const int* cu_seqlens_q, const int* cu_seqlens_kv) {
    prefetch_tensor_map(map_o);
    for (u32 it = 0;; ++it) {
        const int buffer = it % Q_STAGES;
        const u32 parity = (it / Q_STAGES) & 1;
        // The item's words come with its Q (q_full), the end too (m0 < 0).
        mbar_wait(smem_addr(&bars.q_full[buffer]), parity);
        const int m0 = bars.item[buffer][2];
        if (m0 < 0) break;
        mbar_wait(smem_addr(&bars.o_full[buffer]), parity);
        if (bars.o_whole[buffer]) {
            const Coords c =
                box_coords(bars.item[buffer][0], bars.item[buffer][1], m0, 0, heads, kv_heads, cu_seqlens_q, cu_seqlens_kv);
            const u32 tile = q_tile + buffer * Q_TILE_BYTES;
#pragma unroll
            for (int p = 0; p < PANELS; ++p) tma_store_3d(map_o, tile + p * BLOCK_M * 128, 64 * p, c.q1, c.q2);
            bulk_commit_group();
            bulk_wait_read_all();
        }
        mbar_arrive(smem_addr(&bars.q_empty[buffer]));
    }
    bulk_wait_all();
}
#endif
