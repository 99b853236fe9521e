// hopper_schedule.cuh — hopper.cu's persistent tile scheduler (SCHEDULE 1) and the stream-K tail's
// items (STREAM_K 1): which work items a block takes, in which order, and how the producer warp
// publishes each with its Q. A part of hopper.cu, included inside namespace hopper_attn after its
// geometry, Tiles, Coords and the producer's copies (produce_kv): not a standalone header.
//
// Persistent schedule (SCHEDULE 1)
//   Each block loops over work items (b, h, m0), row blocks of one (sequence, head); the producer
//   warp alone schedules (the order and its device counter: schedule_and_produce) and publishes
//   each item in shared memory with its Q (q_full). Non-causal dense batches take a static strided
//   order (item blockIdx.x + k · gridDim.x, row blocks fastest so that concurrent blocks share K/V
//   in L2); causal, windowed and varlen batches take items heaviest first (bottom-up row blocks in
//   sections of heads whose K/V fit in L2), dynamically: item blockIdx.x first, then gridDim.x plus
//   a ticket of the device counter. The last block to finish resets the counter, so a launch (or a
//   CUDA graph replay) needs no host work and never sees a stale count. Between items the
//   pipeline carries over: the K/V ring's slots and phases continue (the producer may load the next
//   item's first K/V tile while the consumers finish the current one), and a q_empty barrier (one
//   arrival per consumer thread, after its O rows are stored and a fence.proxy.async orders those
//   generic-proxy accesses before the next Q's TMA write) lets the producer overwrite the Q tile,
//   whose rows also stage O (with Q_RELEASE 1 the arrival follows the item's last Q·Kᵀ, and O is
//   stored from registers: see the knob); with Q_STAGES 2 items alternate between two Q tiles,
//   item i waiting for q_full[i % 2]'s phase (i / 2) & 1, and the producer copies item i's Q first, once item i − 2
//   has released its tile. With Q_STAGES 2 and CHAIN 0 (O_TMA_STORE) the consumers hand the
//   tile, O staged in it, to the copy warp instead (o_full: each thread's fence.proxy.async, then
//   its arrival, which also publishes o_whole), and store O themselves only where the copy warp
//   does not (a row past the sequence, a cut stream-K item); the copy warp (copy_o_tiles) waits
//   for the item's q_full and o_full phases, stores a whole tile with one TMA store per panel
//   through O's map, waits for the store to have read the tile (cp.async.bulk.wait_group.read)
//   and only then arrives on q_empty, its one arrival. With Q in registers (Q_REGS 1) a thread
//   arrives as soon as it has read its Q fragments, and O goes from registers to global memory:
//   the next item's Q is copied during this item's key loop, and its first Q·Kᵀ follows this
//   item's epilogue with no wait for Q. The ping-pong turns run on across items (an item with no
//   key tile takes none): warpgroup 0 starts the next item while the others finish this one.
//
// Persistent clusters (CLUSTER 2, SCHEDULE 1)
//   A work item is the cluster's pair of row blocks (ITEM_ROWS rows; the
//   schedule's order over pairs as it is over row blocks), cluster c first takes item c; a static
//   order strides by the clusters, a dynamic one takes one ticket of the device counter per
//   cluster: rank 0's producer draws it and sends it to rank 1 (share_ticket: st.async into rank
//   1's ticket word, ticket_full and ticket_empty barriers), so both blocks take the same items,
//   and rank 0 alone counts the cluster as finished for the counter's reset. With CLUSTER_HEADS 1
//   a work item is one row block of a pair of query heads (2j, 2j + 1) that share a K/V head: the
//   schedule runs over the H / 2 pairs, rank r takes head 2j + r, and both blocks' key tiles are the
//   same (the same rows, the same K/V), so neither skips a tile the other computes.

// An item's key segment (all of it unless STREAM_K cuts it: see the stream-K tail) as one word: the
// kind in the low two bits, x above: the tail's first tile, the head's tile count.
// (An enum: a namespace constant adds a PTX symbol to every variant.)
enum SplitKind : int {
    SPLIT_WHOLE = 0,  // the item's every key tile
    SPLIT_HEAD = 1,   // tiles [0, x): the cluster's run ends inside the item
    SPLIT_TAIL = 2,   // tiles [x, T): the cluster's run starts inside the item
};
__device__ __forceinline__ int split_word(int kind, int x) { return kind | (x << 2); }
__device__ __forceinline__ void cut_tiles(Tiles& tiles, int split) {
    const int x = split >> 2;
    if ((split & 3) == SPLIT_TAIL) {
        tiles.first += x;
        tiles.count -= x;
    } else if ((split & 3) == SPLIT_HEAD) {
        tiles.count = x;
    }
}

#if STREAM_K
// ---- the stream-K tail (STREAM_K 1, static schedules) ---------------------------------------------
//
// A static schedule's items all cost the same, so a grid of N items on P clusters ends in a thin
// last wave (N mod P items, the other clusters idle). With STREAM_K the last N mod P + P items are
// cut into P equal runs of key tiles, one per cluster (each run longer than one item, so an item is
// cut at most once): cluster c computes the key tiles [c·U/P, (c+1)·U/P) of those items' tiles laid
// end to end (U tiles). A cut item's two segments, the head (its first tiles, the end of cluster
// c's run) and the tail (the rest, the start of cluster c + 1's), each end with a partial O (not
// normalised), row max and row sum; per consumer warp, the first to finish writes its partial to
// the workspace and the other waits for it (it is being written: no deadlock), merges it into its
// own and stores the rows. Workspace (after the two counter words, the host's, zeroed once): one
// flag word per block and consumer warp, left zero, then one partial per block (the tail's block
// names the cut): per consumer thread its PARTIAL_WORDS floats, thread-fastest (coalesced).
constexpr int PARTIAL_WORDS = PANELS * 32 + 4;  // O's accumulators, then row max and sum (2 each)

// This cluster's `it`-th item of a static order of `total` items whose tail is cut: its index
// (left as it is before the tail) and its segment; false when the cluster's run is done. Computed
// again from `it` for every item: the producer's 24 registers hold no more loop-carried state. The
// tail is cut where the last wave is thin, there is more than one wave, an item has more than one
// key tile, and the tail's tiles fit split_word (below 2^29).
__device__ __forceinline__ bool stream_k_item(int total, int seq_kv, u32 it, int& index, int& split) {
    const int clusters = static_cast<int>(gridDim.x / CLUSTER);
    const int c = static_cast<int>(blockIdx.x / CLUSTER);
    const int thin = total % clusters;
    const int item_tiles = (seq_kv + BLOCK_N - 1) / BLOCK_N;
    const long long tail_tiles = static_cast<long long>(thin + clusters) * item_tiles;
    if (thin == 0 || total <= clusters || item_tiles < 2 || tail_tiles >= (1ll << 29)) return true;
    const int cut_from = total - thin - clusters;
    const int whole = cut_from > c ? (cut_from - c + clusters - 1) / clusters : 0;
    if (static_cast<int>(it) < whole) return true;
    // The first tile of cluster k's run: k / clusters of the tail's tiles, in 32 bits (a 64-bit
    // division is a call, whose frame spilled the producer): tiles = q · clusters + r, k · r <
    // clusters².
    const int tiles = static_cast<int>(tail_tiles);
    const int q = tiles / clusters;
    const int r = tiles - q * clusters;
    const int run = c * q + c * r / clusters;
    const int run_end = (c + 1) * q + (c + 1) * r / clusters;
    const int j = run / item_tiles + (static_cast<int>(it) - whole);
    if (j * item_tiles >= run_end) return false;
    index = cut_from + j;
    if (run > j * item_tiles) split = split_word(SPLIT_TAIL, run - j * item_tiles);
    else if (run_end < (j + 1) * item_tiles) split = split_word(SPLIT_HEAD, run_end - j * item_tiles);
    return true;
}
#endif

#if SCHEDULE
// ---- the persistent scheduler (SCHEDULE 1) --------------------------------------------------------
//
// Work items are row blocks of one (sequence, head), numbered 0 .. total − 1 in the order below; a
// block takes item blockIdx.x first, then either blockIdx.x + k · gridDim.x (static: every item does
// the same work) or gridDim.x + the next ticket of a device counter (dynamic: causal masks, windows
// and varlen batches, whose items differ), so the heaviest items, numbered first, start first. Every
// block's items come in increasing order.
//   - Dense, static: row block fastest, then head, then batch (consecutive items share K/V in L2).
//   - Dense, dynamic: sections of `section` (batch, head) pairs whose K and V fit in 32 MB of L2
//     (a power of two of K/V heads, times the query heads sharing each; FA3's L2 swizzle); within a
//     section heads fastest and row blocks heaviest first: bottom-up when the last rows see the most
//     keys (no left window, a right bound: causal), else top-down.
//   - Varlen (dynamic): sequence by sequence (cu_seqlens; an empty sequence has no item), within a
//     sequence as dense dynamic with one section (or row block fastest when nothing is masked).
// Only the producer warp schedules; lane 0 writes each item into `Barriers::item` before its Q
// (q_full's phase publishes both) and the consumers read it back; m0 < 0 says there is none left.
struct Schedule {
    int heads;
    bool varlen;
    bool dynamic;
    bool bottom_up;
    bool heads_fastest;  // row blocks of one index of order, the heads of a section in turn
    // Dense: row blocks per (batch, head), items, and (batch, head) pairs per section.
    int blocks;
    int total;
    int bh;
    int section;
    // Varlen: the first sequence the next item may lie in, and the items before it.
    int seq_base;
    int item_base;
};

__device__ __forceinline__ Schedule make_schedule(int batch, int heads, int kv_heads, int seq_q, int seq_kv,
                                                  int causal, int window_left, int window_right,
                                                  const int* cu_seqlens_q) {
    Schedule s;
    s.heads = heads / ITEM_HEADS;  // with CLUSTER_HEADS an item's head index is its pair's
    s.varlen = cu_seqlens_q != nullptr;
    const bool masked = causal || window_left >= 0 || window_right >= 0;
    s.dynamic = s.varlen || masked;
    s.bottom_up = window_left < 0 && (causal || window_right >= 0);
    s.heads_fastest = masked;
    s.blocks = (seq_q + ITEM_ROWS - 1) / ITEM_ROWS;
    s.bh = batch * s.heads;
    s.total = s.blocks * s.bh;
    // K/V heads whose K and V (seq_kv · D · 2 bytes each) fit in 32 MB, rounded down to a power of
    // two, at least one; times the query heads that share each.
    const int fit = (32 << 20) / (4 * D) / max(seq_kv, 1);
    s.section = (fit > 0 ? 1 << (31 - __clz(fit)) : 1) * (heads / kv_heads) / ITEM_HEADS;
    s.seq_base = 0;
    s.item_base = 0;
    return s;
}

// Item `index` as (b, h, m0); false when there is none (index past the last). Warp-wide (every lane
// of the producer warp, `index` uniform); advances the varlen scan.
__device__ __forceinline__ bool schedule_item(Schedule& s, int index, int batch, const int* cu_seqlens_q, int lane,
                                              int& b, int& h, int& m0) {
    int blocks;  // row blocks of the item's (sequence, head)
    int r;       // the item's rank within its section (dense) or sequence (varlen)
    int span;    // heads taking turns in that section or sequence
    int base;    // (batch, head) pair of the section's first head; varlen: the sequence's head 0
    if (!s.varlen) {
        if (index >= s.total) return false;
        if (!s.heads_fastest) {
            const int pair = index / s.blocks;
            b = pair / s.heads;
            h = pair - b * s.heads;
            m0 = (index - pair * s.blocks) * ITEM_ROWS;
            return true;
        }
        const int per_section = s.section * s.blocks;
        const int sec = index / per_section;
        base = sec * s.section;
        span = min(s.section, s.bh - base);
        r = index - sec * per_section;
        blocks = s.blocks;
    } else {
        // Lanes take 32 sequences at a time from seq_base on, their items (row blocks × heads)
        // summed by a shuffle scan, until the sum passes index.
        for (;;) {
            const int seq = s.seq_base + lane;
            const int len = seq < batch ? cu_seqlens_q[seq + 1] - cu_seqlens_q[seq] : 0;
            const int items = (len + ITEM_ROWS - 1) / ITEM_ROWS * s.heads;
            int incl = items;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d) incl += y;
            }
            const unsigned hit = __ballot_sync(0xffffffffu, s.item_base + incl > index);
            if (hit != 0u) {
                const int l = __ffs(hit) - 1;
                s.seq_base += l;
                s.item_base += __shfl_sync(0xffffffffu, incl - items, l);
                blocks = (__shfl_sync(0xffffffffu, len, l) + ITEM_ROWS - 1) / ITEM_ROWS;
                break;
            }
            if (s.seq_base + 32 >= batch) return false;
            s.item_base += __shfl_sync(0xffffffffu, incl, 31);
            s.seq_base += 32;
        }
        b = s.seq_base;
        r = index - s.item_base;
        if (!s.heads_fastest) {
            h = r / blocks;
            m0 = (r - h * blocks) * ITEM_ROWS;
            return true;
        }
        base = 0;
        span = s.heads;
    }
    const int rank = r / span;  // heaviest first
    const int pair = base + (r - rank * span);
    if (!s.varlen) {
        b = pair / s.heads;
        h = pair - b * s.heads;
    } else {
        h = pair;
    }
    m0 = (s.bottom_up ? blocks - 1 - rank : rank) * ITEM_ROWS;
    return true;
}

// The producer's words of an item, (b, h, m0), into Q buffer `buffer`'s slot (m0 < 0: none left),
// through a 32-bit shared address: a generic pointer with a run-time index took two more of the
// producer's 24 registers (setmaxnreg) and spilled.
// With one Q tile the words are plain stores (the kernel's code as it was before two tiles).
// With STREAM_K a fourth word: the item's key segment (split_word).
__device__ __forceinline__ void publish_item(Barriers& bars, int buffer, int b, int h, int m0, int split) {
#if Q_STAGES == 1
    (void)buffer;
    bars.item[0][0] = b;
    bars.item[0][1] = h;
    bars.item[0][2] = m0;
#if STREAM_K
    bars.item[0][3] = split;
#endif
#else
    const u32 words = smem_addr(&bars.item[0][0]) + 4u * ITEM_WORDS * static_cast<u32>(buffer);
    asm volatile("st.shared.u32 [%0], %1;\n\tst.shared.u32 [%0+4], %2;\n\tst.shared.u32 [%0+8], %3;\n" ::"r"(words),
                 "r"(b), "r"(h), "r"(m0)
                 : "memory");
#if STREAM_K
    asm volatile("st.shared.u32 [%0+12], %1;\n" ::"r"(words), "r"(split) : "memory");
#endif
#endif
    (void)split;
}

// The end of a block's items: m0 < 0 in Q buffer `buffer`'s item words.
__device__ __forceinline__ void publish_no_item(Barriers& bars, int buffer) {
#if Q_STAGES == 1
    (void)buffer;
    bars.item[0][2] = -1;
#else
    publish_item(bars, buffer, 0, 0, -1, split_word(SPLIT_WHOLE, 0));
#endif
}

// The Q buffer of the producer's item `it` (the block's it-th), once the consumers have released it
// from the item Q_STAGES before (q_empty's phase of the buffer's previous use).
__device__ __forceinline__ int wait_for_q_buffer(Barriers& bars, u32 it) {
    const int buffer = it % Q_STAGES;
    const u32 use = it / Q_STAGES;  // the buffer's earlier items
    if (use > 0) mbar_wait(smem_addr(&bars.q_empty[buffer]), (use - 1) & 1);
    return buffer;
}

#if CLUSTER > 1

// The cluster's ticket for the item after the block's `it`-th (lane 0 of the producer warp, dynamic
// schedules, CLUSTER 2): rank 0 draws it from the device counter and stores it into rank 1's ticket
// word (st.async, completing on rank 1's ticket_full) once rank 1 has read the one before
// (ticket_empty); rank 1 waits for it, reads it and releases the word. Both blocks thus take the
// same items in the same heaviest-first order, one draw per cluster.
__device__ __forceinline__ unsigned int share_ticket(Barriers& bars, unsigned int* counter, u32 it) {
    if (cluster_rank() == 0u) {
        const unsigned int ticket = atomicAdd(&counter[0], 1u);
        if (it > 0) mbar_wait(smem_addr(&bars.ticket_empty), (it - 1) & 1);
        st_async_remote(smem_addr(&bars.ticket), smem_addr(&bars.ticket_full), 1u, ticket);
        return ticket;
    }
    const u32 full = smem_addr(&bars.ticket_full);
    mbar_arrive_expect_tx(full, 4);
    mbar_wait(full, it & 1);
    const unsigned int ticket = bars.ticket;
    // Release semantics (CTA scope): the read above is performed before the word is given back.
    mbar_arrive_remote(smem_addr(&bars.ticket_empty), 0u, true);
    return ticket;
}
#endif

// The producer warp of a persistent block: schedules its items and issues their copies (lane 0),
// then tells the consumers that none is left. Per item: its first K/V tile (which may land while
// the consumers finish the previous item), then, once the consumers are done with the Q tile, the
// item and its Q, then its other K/V tiles; with two Q tiles (Q_STAGES 2) the item and its Q
// first, into the tile the item before the previous one released, then all its K/V tiles. Dynamic
// schedules take the next ticket at the start of an item (its latency hides behind the copies) and
// the last block to finish resets the counter to zero for the next launch (every block has taken
// its last ticket by then; launches on one stream run one after another, CUDA graph replays
// included).
__device__ __forceinline__ void schedule_and_produce(Barriers& bars, u32 q_tile, u32 k_tiles, u32 v_tiles,
                                                     const HopperTensorMap* map_q, const HopperTensorMap* map_k,
                                                     const HopperTensorMap* map_v, int batch, int heads,
                                                     int kv_heads, int seq_q, int seq_kv, int causal,
                                                     int window_left, int window_right, const int* cu_seqlens_q,
                                                     const int* cu_seqlens_kv, unsigned int* counter, int lane) {
    Schedule sched = make_schedule(batch, heads, kv_heads, seq_q, seq_kv, causal, window_left, window_right,
                                   cu_seqlens_q);
    int copied = 0;
    // With CLUSTER 2 the items are the clusters' (both blocks take the same ones): the cluster's
    // index first.
    int index = blockIdx.x / CLUSTER;
    u32 it = 0;
    for (;; ++it) {
        int b, h, m0;
        // This item's key segment: all of it, unless the stream-K tail cuts a static order's.
        int split = split_word(SPLIT_WHOLE, 0);
#if STREAM_K
        if (!sched.dynamic && !stream_k_item(sched.total, seq_kv, it, index, split)) break;
#endif
        if (!schedule_item(sched, index, batch, cu_seqlens_q, lane, b, h, m0)) break;
        unsigned int ticket = 0;
#if CLUSTER > 1
        // Both blocks of the cluster take the same items: rank 0 draws the ticket and sends it.
        if (sched.dynamic && lane == 0) ticket = share_ticket(bars, counter, it);
#else
        if (sched.dynamic && lane == 0) ticket = atomicAdd(&counter[0], 1u);
#endif
        if (lane == 0) {
#if CLUSTER_HEADS
            // The item is the cluster's pair of heads 2h, 2h + 1 (one K/V head; the same rows and
            // key tiles): this block's is its rank's.
            h = h * ITEM_HEADS + static_cast<int>(cluster_rank());
#endif
            const attn::HeadView view =
                attn::head_view(b, h, heads, kv_heads, seq_q, seq_kv, cu_seqlens_q, cu_seqlens_kv);
            Tiles tiles = block_tiles(m0, view.seq_q, view.seq_kv, causal, window_left, window_right, ITEM_ROWS);
            cut_tiles(tiles, split);
#if CLUSTER > 1 && !CLUSTER_HEADS
            // The item is the cluster's pair of row blocks from m0: this block's is its rank's.
            m0 += static_cast<int>(cluster_rank()) * BLOCK_M;
#endif
            Coords c = box_coords(b, h, m0, tiles.first * BLOCK_N, heads, kv_heads, cu_seqlens_q, cu_seqlens_kv);
            // With one Q buffer the item's first K/V tile goes first: it lands while the consumers
            // finish the previous item, whose epilogue frees the buffer. With two, this item's
            // buffer was freed by the item before the previous one, and with Q_RELEASE the buffer
            // is freed at the previous item's last tile: its Q goes first.
            const int lead = Q_STAGES == 2 || Q_RELEASE ? 0 : min(tiles.count, 1);
            produce_kv(bars, copied, k_tiles, v_tiles, map_k, map_v, c, lead);
            const int buffer = wait_for_q_buffer(bars, it);
            publish_item(bars, buffer, b, h, m0, split);
            // Its arrive releases the item's words.
            load_q_tile(bars, q_tile, map_q, c.q1, c.q2, buffer);
            produce_kv(bars, copied, k_tiles, v_tiles, map_k, map_v, c, tiles.count - lead);
        }
        index = sched.dynamic ? gridDim.x / CLUSTER + static_cast<int>(__shfl_sync(0xffffffffu, ticket, 0))
                              : index + static_cast<int>(gridDim.x / CLUSTER);
    }
    if (lane == 0) {
        const int buffer = wait_for_q_buffer(bars, it);
        publish_no_item(bars, buffer);
        // The phase completes with no transaction: no item left.
        mbar_arrive(smem_addr(&bars.q_full[buffer]));
        // With CLUSTER 2 rank 0 drew the cluster's tickets: it alone counts the cluster finished,
        // once rank 1 has read the last one (its remote arrival).
        bool counts = true;
#if CLUSTER > 1
        await_last_releases(bars, copied);
        counts = cluster_rank() == 0u;
        if (sched.dynamic && counts && it > 0) mbar_wait(smem_addr(&bars.ticket_empty), (it - 1) & 1);
#endif
        if (sched.dynamic && counts) {
            __threadfence();  // this block's (cluster's) tickets before its count
            if (atomicAdd(&counter[1], 1u) == gridDim.x / CLUSTER - 1) {
                __threadfence();
                atomicExch(&counter[0], 0u);
                atomicExch(&counter[1], 0u);
            }
        }
    }
}
#endif
