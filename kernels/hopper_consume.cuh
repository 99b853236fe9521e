// hopper_consume.cuh — hopper.cu's consumer warpgroups on one work item (consume_item): the key
// tiles its rows see, Q·Kᵀ, online softmax and P·V, overlapped (OVERLAP) and in turns (PINGPONG)
// as the knobs say, the tiles they skip released, the chained turn into the next item (CHAIN),
// then the epilogue (hopper_epilogue.cuh). A part of hopper.cu, included inside namespace
// hopper_attn after hopper_epilogue.cuh: not a standalone header. hopper.cu's "Ordering" states
// the barrier and turn protocol this loop keeps.
//
// Fragment layouts (per warp of the warpgroup, g = lane / 4, t = lane % 4)
//   D of m64nNk16 (f32): registers 4i..4i+3 hold columns 8i + 2t, +1 of row g (4i, 4i+1) and row
//   g + 8 (4i+2, 4i+3) — the mma.sync m16n8 C layout repeated over N / 8 chunks.
//   A from registers (m64k16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8,
//   2t+8..) — the mma.sync m16n8k16 A layout; so P k-step kk is S chunks 2kk (a0, a1) and 2kk+1.

// The consumer warpgroups' work on one item: the key tiles its rows see (overlapped and ping-ponged
// as the knobs say), the others released, then the epilogue (O staged in the warpgroup's Q rows,
// 16-byte stores). Starts at `ring`'s slot and leaves `ring` past the item's tiles. The caller has
// waited for q_full.
// Chained items (CHAIN 1): before its last turn the item asks `chain_next(q, kv0)` whether the next
// item chains (false: none, or not one to chain; true: q is its Q tile, kv0 its first key); if so,
// that turn issues the next item's first Q·Kᵀ beside this item's last P·V and runs its softmax while the P·V completes, leaving `rows` to the
// next item, which is then consumed with `chained_in` (its first S done). Returns whether it chained.
// Why: unchained, an item's first turn issues a Q·Kᵀ alone and its last a P·V alone, and the
// epilogue waits for the last (TUNING.md, `chain`).
template <class ChainNext>
__device__ __forceinline__ bool consume_item(Barriers& bars, u32 k_tiles, u32 v_tiles, Ring& ring,
                                             const ConsumerItem& item, RowState& rows, bool chained_in,
                                             ChainNext&& chain_next, int causal, int window_left,
                                             int window_right, float scale, int warp, int lane) {
    const int wg = warp >> 2;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wg_row0 = wg * 64;                      // first row of the warpgroup in the block tile
    const int warp_row0 = wg_row0 + (warp & 3) * 16;  // first row of this warp's D fragment
    const int m0 = item.m0;
    const int len_q = item.len_q;
    const int len_kv = item.len_kv;
    const int num_tiles = item.tiles.count;
    const int first_tile = item.tiles.first;
    const int kv_first = first_tile * BLOCK_N;  // the first key of the block's tile 0

    // Tiles this warpgroup computes: the block's tiles [wg_first, wg_end) (wgmma is warpgroup-wide,
    // so every decision around it is uniform over the warpgroup); it skips the others (a prefix
    // below its first row's window, a suffix past its last row's limit). A tile needs no mask when
    // every row of the warpgroup sees all its keys: it starts at or after the last row's first key
    // (wg_lo_max) and ends at or before the first row's key limit (wg_hi_min). A warpgroup whose
    // rows all lie past the sequence's end computes nothing.
    const int wg_row_first = m0 + wg_row0;
    const int wg_row_last = wg_row_first + 63;  // may lie past len_q: its limits only widen the masks
    const int wg_lo_max = row_kv_lo(wg_row_last, len_q, len_kv, window_left);
    const int wg_hi_min = row_kv_hi(wg_row_first, len_q, len_kv, causal, window_right);
#if HOPPER_NARROW_TAIL
    const int wg_hi_max = row_kv_hi(wg_row_last, len_q, len_kv, causal, window_right);  // the rows' key limit
#endif
    int wg_first = 0;
    int wg_end = 0;
    if (wg_row_first < len_q) {
        // At least 0: a stream-K tail segment starts past the rows' first key.
        wg_first = min(max(row_kv_lo(wg_row_first, len_q, len_kv, window_left) / BLOCK_N - first_tile, 0),
                       num_tiles);
#if HOPPER_NARROW_TAIL
        const int hi = wg_hi_max;
#else
        const int hi = row_kv_hi(wg_row_last, len_q, len_kv, causal, window_right);
#endif
        wg_end = max(min((hi + BLOCK_N - 1) / BLOCK_N - first_tile, num_tiles), wg_first);
    }
    // Keys [lane_lo, lane_hi) of this lane's rows g and g + 8.
    int lane_lo[2];
    int lane_hi[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = m0 + warp_row0 + g + 8 * i;
        lane_lo[i] = row_kv_lo(row, len_q, len_kv, window_left);
        lane_hi[i] = row_kv_hi(row, len_q, len_kv, causal, window_right);
    }

    const float scale_log2 = scale * ATTN_LOG2E;
    // Rows of a narrow window see few keys, one of which may carry nearly all the weight: under a
    // kept max its probability is not exactly 1, and its rounding to the element type shows in the
    // output (bf16 went past the oracle's bound at window 1,-1), where the exact max makes it 1.
    // So a window narrower than LAZY_RESCALE_MIN_WINDOW keys keeps the exact max (a negative slack).
    const bool wide_rows = window_left < 0 || window_right < 0 || window_left + window_right >= LAZY_RESCALE_MIN_WINDOW;
    const float lazy_slack = LAZY_RESCALE && wide_rows ? LAZY_RESCALE_SLACK : -1.f;
#if Q_REGS
    // Q·Kᵀ's A operand: this thread's fragments of Q, in registers for the whole item.
    u32 q_operand[QK_K_STEPS][4];
    load_q_frag(q_operand, item.q_smem, warp_row0, g, t);
#if SCHEDULE
    // Q is in registers and the epilogue stores O from registers: the Q tile is free once every
    // consumer thread has read its fragments, so the producer copies the next item's Q during this
    // item's key loop (the generic-proxy reads ordered before that async-proxy write). The turns
    // run on across items (see turns_open), so no hand-over waits for the Q tile.
    release_q_tile(bars, 0);  // Q in registers: one Q tile (Q_STAGES 1)
#endif
#else
    const u32 q_operand = item.q_tile + wg_row0 * 128;  // this warpgroup's 64 rows of every Q panel
#endif
    auto k_slot = [&](int s) { return k_tiles + s * KV_TILE_BYTES; };
    auto v_slot = [&](int s) { return v_tiles + s * KV_TILE_BYTES; };
    auto k_full = [&](int s) { return smem_addr(&bars.k_full[s]); };
    auto v_full = [&](int s) { return smem_addr(&bars.v_full[s]); };
    auto k_empty = [&](int s) { return smem_addr(&bars.k_empty[s]); };
    auto v_empty = [&](int s) { return smem_addr(&bars.v_empty[s]); };

    float o_acc[PANELS][32];
    float(&row_max)[2] = rows.row_max;  // running max (scale·log2e domain) of rows g and g + 8
    float(&row_sum)[2] = rows.row_sum;  // this lane's partial sums of rows g and g + 8
    u32(&p_frag)[PV_K_STEPS][4] = rows.p_frag;
    float(&rescale)[2] = rows.rescale;
    // A chained item's rows took its first tile in the previous item's last turn.
    clear_o(o_acc);
    if (!chained_in) clear_rows(row_max, row_sum);
    bool chained = false;
    // This item's final row max and sum: with CHAIN kept aside in the chained turn, where the next
    // item's softmax takes over row_max and row_sum.
    float item_max[2];
    float item_sum[2];

#if HOPPER_NARROW_TAIL  // (OVERLAP 1 only)
    // The narrow tail: where no row of the warpgroup sees a key past the first 128 of its last tile
    // (a sequence's ragged end: 2048 keys are 12 tiles of 160 and one of 128), that tile's softmax
    // takes its first 128 keys only (the others' probabilities are 0), with no per-key mask where
    // every row sees all 128 (TUNING.md, `narrow-tail`). The Q·Kᵀ stays the tile's wgmma: an
    // N = 128 one beside it left ptxas short of registers for the wgmma pipeline (it serialised them).
    // The softmax of the block's tile that starts at key kv0, `last` if it is the warpgroup's last.
    auto tile_scores = [&](float(&s_acc)[S_REGS], int kv0, bool last) {
        if (last && kv_first + (wg_end - 1) * BLOCK_N + 128 >= wg_hi_max) {
            softmax_scores<128>(s_acc, kv0, kv0 + 128 > wg_hi_min, kv0 < wg_lo_max, lane_lo, lane_hi, t, scale_log2,
                                lazy_slack, row_max, row_sum, rescale);
            return;
        }
        softmax_scores(s_acc, kv0, kv0 + BLOCK_N > wg_hi_min, kv0 < wg_lo_max, lane_lo, lane_hi, t, scale_log2,
                       lazy_slack, row_max, row_sum, rescale);
    };
#endif

    // Block tile j lives in the ring's slot j places on from its position at the item's start.
    int slot = ring.slot;
    u32 phase = ring.phase;
    // Tiles of the block that this warpgroup skips (its rows see none of their keys) are released
    // all the same, each once it has landed: the producer reuses a slot only after every consumer
    // thread's arrival, and waiting for the landing keeps these arrivals in the slot's round. With
    // PINGPONG each takes an (empty) turn.
    auto skip_tiles = [&](int count) {
        for (int j = 0; j < count; ++j) {
            mbar_wait(k_full(slot), phase);
            mbar_wait(v_full(slot), phase);
            release_kv(k_empty(slot));
            release_kv(v_empty(slot));
            turn_begin(wg);  // the skipped tile's (empty) turn
            turn_end(wg);
            advance_slot(slot, phase);
        }
    };
#if OVERLAP
    // FA3's intra-warpgroup overlap. Iteration j issues S_{j+1} = Q·K_{j+1}ᵀ, rescales O for tile j,
    // issues O += P_j·V_j, waits for S_{j+1} only and runs its softmax while P_j·V_j is still on the
    // tensor cores, then waits for that, releases tile j's slot and packs P_{j+1}.
    // With PINGPONG every warpgroup takes 1 + num_tiles turns, round-robin, warpgroup 0 first: one
    // per skipped tile of the prefix, the prologue's, one per tile it computes, and one per skipped
    // tile of the suffix. Turn k of every warpgroup needs at most tile k landed, and before it the
    // warpgroup has released every tile up to k − 2: the producer (STAGES ≥ 2) can always proceed.
    // The turns run on from the previous item (turns_open, turns_close).
    // A chained item's prologue ran in the previous item's last turn (every warpgroup computes
    // every tile of a chained item: no prefix to skip).
    skip_tiles(wg_first);
    if (!chained_in) {
        if (wg_end > wg_first) mbar_wait(k_full(slot), phase);
#if PINGPONG
        if (num_tiles > 0) turn_begin(wg);
#endif
        if (wg_end > wg_first) {
            float s_acc[S_REGS];
            issue_qk(s_acc, q_operand, k_slot(slot));
            turn_end(wg);
            wgmma_wait<0>();
            release_kv(k_empty(slot));
#if HOPPER_NARROW_TAIL
            tile_scores(s_acc, kv_first + wg_first * BLOCK_N, wg_end == wg_first + 1);
#else
            const int kv0 = kv_first + wg_first * BLOCK_N;
            softmax_scores(s_acc, kv0, kv0 + BLOCK_N > wg_hi_min, kv0 < wg_lo_max, lane_lo, lane_hi, t,
                           scale_log2, lazy_slack, row_max, row_sum, rescale);
#endif
            pack_p(s_acc, p_frag);
        }
#if PINGPONG
        else if (num_tiles > 0) {
            turn_end(wg);
        }
#endif
    }
    for (int j = wg_first; j < wg_end; ++j) {
        const int next_slot = slot + 1 == STAGES ? 0 : slot + 1;
        const u32 next_phase = next_slot == 0 ? phase ^ 1 : phase;
        u64 desc_v[PV_K_STEPS][PANELS];
        pv_descs(v_slot(slot), desc_v);
        // Each branch is one straight wgmma pipeline (ptxas serialises wgmma across divergent paths);
        // the barrier waits come before it.
// The steady key tile, S_{j+1} beside P_j·V_j, around its softmax SCORES (a statement on s_acc): one
// text for the narrow tail's two copies and for the one copy without it.
#define HOPPER_STEADY_TILE(SCORES)                                             \
    {                                                                          \
        mbar_wait(k_full(next_slot), next_phase);                              \
        mbar_wait(v_full(slot), phase);                                        \
        float s_acc[S_REGS];                                                   \
        turn_begin(wg);                                                        \
        issue_qk(s_acc, q_operand, k_slot(next_slot));                         \
        rescale_o(o_acc, rescale);                                             \
        issue_pv(o_acc, p_frag, desc_v);                                       \
        turn_end(wg);                                                          \
        wgmma_wait<1>(); /* S_{j+1}; P_j·V_j may still run */                  \
        release_kv(k_empty(next_slot));                                        \
        SCORES;                                                                \
        wgmma_wait<0>();                                                       \
        _Pragma("unroll") for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]); \
        release_kv(v_empty(slot));                                             \
        pack_p(s_acc, p_frag);                                                 \
    }
#if HOPPER_NARROW_TAIL
        // `last`: tile j + 1 is the warpgroup's last. With a narrow tail two copies (the loop's and
        // the last tile's, each with its softmax; tile_scores is inlined with a constant): with one
        // copy branching between the two softmaxes ptxas left P's packing behind the branch's join,
        // after the wait for P_j·V_j (nvdisasm; TUNING.md, `narrow-tail`).
        auto steady_tile = [&](bool last) HOPPER_STEADY_TILE(tile_scores(s_acc, kv_first + (j + 1) * BLOCK_N, last));
        if (j + 2 < wg_end) {
            steady_tile(false);
        } else if (j + 1 < wg_end) {
            steady_tile(true);
#else
        // Without the narrow tail: one copy in place (through lambdas, CHAIN's configs spilled where
        // they had compiled clean).
        if (j + 1 < wg_end) {
            HOPPER_STEADY_TILE({
                const int kv0 = kv_first + (j + 1) * BLOCK_N;
                softmax_scores(s_acc, kv0, kv0 + BLOCK_N > wg_hi_min, kv0 < wg_lo_max, lane_lo, lane_hi, t,
                               scale_log2, lazy_slack, row_max, row_sum, rescale);
            })
#endif
#undef HOPPER_STEADY_TILE
        } else {
#if CHAIN
            // Block-uniform (the items' words): every warpgroup of the block chains, or none.
            u32 next_q_tile = 0;
            int next_kv0 = 0;
            const bool chain = chain_next(next_q_tile, next_kv0);
#else
            constexpr bool chain = false;
            (void)chain_next;
#endif
            if (!chain) {
#if Q_RELEASE
                // Every Q·Kᵀ of the item has completed (the wait above, or the prologue's): the Q
                // tile goes back to the producer, which copies the next item's Q behind this tile
                // and the epilogue (O from registers).
                mbar_arrive(smem_addr(&bars.q_empty[0]));
#endif
                mbar_wait(v_full(slot), phase);
                turn_begin(wg);
                rescale_o(o_acc, rescale);
                issue_pv(o_acc, p_frag, desc_v);
                turn_end(wg);
                wgmma_wait<0>();
#pragma unroll
                for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
                release_kv(v_empty(slot));
            }
#if CHAIN
            else {
                // The next item's first tile is the ring's next tile, as tile j + 1 would be; its Q
                // is in the other Q tile. Chained items share their keys' range (unmasked, dense:
                // every row sees [0, S_kv)), so this item's masks serve for that tile.
                mbar_wait(k_full(next_slot), next_phase);
                mbar_wait(v_full(slot), phase);
                float s_acc[S_REGS];
                turn_begin(wg);
                issue_qk(s_acc, next_q_tile + wg_row0 * 128, k_slot(next_slot));
                rescale_o(o_acc, rescale);
                issue_pv(o_acc, p_frag, desc_v);
                turn_end(wg);
                // This item's max and sums took their last tile in the softmax before this turn.
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    item_max[h] = row_max[h];
                    item_sum[h] = row_sum[h];
                }
                clear_rows(row_max, row_sum);
                wgmma_wait<1>();  // the next item's first S; this item's last P·V may still run
                release_kv(k_empty(next_slot));
                softmax_scores(s_acc, next_kv0, next_kv0 + BLOCK_N > wg_hi_min, next_kv0 < wg_lo_max, lane_lo,
                               lane_hi, t, scale_log2, lazy_slack, row_max, row_sum, rescale);
                wgmma_wait<0>();
#pragma unroll
                for (int p = 0; p < PANELS; ++p) fence_regs(o_acc[p]);
                release_kv(v_empty(slot));
                pack_p(s_acc, p_frag);
                chained = true;
            }
#endif
        }
        slot = next_slot;
        phase = next_phase;
    }
#else
    skip_tiles(wg_first);
    for (int j = wg_first; j < wg_end; ++j) {
        const int kv0 = kv_first + j * BLOCK_N;
        // The same tile code as micro_hopper.cu's loop (hopper_pipeline.cuh).
        HOPPER_CONSUME_TILE(q_operand, k_slot(slot), v_slot(slot), kv0, kv0 + BLOCK_N > wg_hi_min, kv0 < wg_lo_max, lane_lo,
                            lane_hi, t);
        advance_slot(slot, phase);
    }
#endif
    skip_tiles(num_tiles - wg_end);
    ring.slot = slot;
    ring.phase = phase;
#if Q_RELEASE
    // A warpgroup that computed no tile (or, unoverlapped, every one) is done with Q only now.
    if (!OVERLAP || wg_end == wg_first) mbar_arrive(smem_addr(&bars.q_empty[0]));
#endif

    if (!chained) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            item_max[h] = row_max[h];
            item_sum[h] = row_sum[h];
        }
    }
#if STREAM_K
    // A cut item: one warp's segment merges the other's partial and stores; the other stores nothing.
    const bool store = item.split == SPLIT_WHOLE ||
                       merge_split(o_acc, item_max, item_sum, item.split, item.words, warp, lane);
#else
    constexpr bool store = true;
#endif
    float inv_l[2];
    row_reciprocals(item_sum, inv_l);
    store_o(item, o_acc, inv_l, store, wg, warp_row0, g, t, lane);
    return chained;
}
