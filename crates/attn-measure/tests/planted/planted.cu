// Planted kernels: a plain correct attention (one warp per query row, online softmax, as
// kernels/naive.cu) with one defect chosen by PLANT, each of a kind a candidate might use to fool
// the gate. Geometry: BLOCK_M = NUM_WARPS = rows per block, one warp per row.
//
//  0 correct              1 writes nothing          2 replays a stale (cached) output
//  3 correct only for its first 12 launches         4 corrupts one row (last batch and head)
//  5 forgets the running max (exp overflows on large logits)
//  6 ignores the causal flag                        7 aligns the causal mask top-left
//  8 reads its inputs as fp16 whatever the dtype    9 never finishes
// 10 faults (writes far outside its output)
// 11 memoises outputs by input content: correct every time, and fast on repeated inputs
// 12 ignores its scale argument (uses 1/sqrt(D))
// 13 writes 64 elements just past the end of O      14 writes one element (2 bytes) just before O
// 15 zeroes the first element of every Q row after reading it (writes into its inputs)
// 16 writes one element just past the end of K (between the inputs)
// 17 non-deterministic: every other launch of a block flips the last bit of one element per row
// 18 writes garbage over a row whose output is already written (a launch that is not the first on
//    its output since the poisoning: batch mode's reuse made visible)
// 19 skips rows whose output is already written (batch mode's reuse turned into speed)
// 20 ignores a packed varlen batch's sequence boundaries for its keys: each query row attends to
//    the whole batch's keys from token 0, causal as if the batch were one sequence (reads the
//    variant parameters: compile with VARIANTS=1)
// 21-24 read the variant parameters (VARIANTS=1): grouped heads and windows, each right on its
//    case's own group and window, wrong elsewhere:
// 21 maps query head h to K/V head h >> floor(log2(H / H_kv)) (right for power-of-two groups)
// 22 maps query head h to K/V head h / 4, whatever kv_heads says (right for groups of 4)
// 23 rounds window_left down to a multiple of 64 (right for windows of 0, 64, 128, ...)
// 24 ignores window_right (a window bounds its rows on the right only through the causal flag)
// 25 maps query head h to K/V head h >> 2 (a group of 4 assumed): with more heads to a group it
//    reads K/V heads past the end of K and V (grouped heads: compile with VARIANTS=1)
// 26 reads one key past each head's last (K only), its score masked by arithmetic (× 0, − 1e30):
//    the last head's extra key lies past the end of K, and only a NaN there changes the output
// 27 wrong and non-deterministic: 4's bad row and 17's flipped bit together
// 28 reads a halo row before each head's first query row, weighted by 0: before Q for the first
//    head, where only a NaN changes the output
//
// Launches are counted per block and per problem (its sizes hashed into the counter's index), so
// that the small problems of the gate's edge battery do not age the counters of the case's own.
#include "attn_common.cuh"

#ifndef PLANT
#define PLANT 0
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#define DIMS_PER_LANE ((HEAD_DIM + 31) / 32)
#define MEMO_SLOTS 16
#define MEMO_ELEMS (8 * 2048 * 128)

__device__ unsigned int block_launches[1 << 16];
__device__ unsigned long long memo_keys[MEMO_SLOTS];
#define MEMO_BLOCKS 16384
__device__ int memo_done[MEMO_SLOTS][MEMO_BLOCKS];
__device__ elem_t memo_out[MEMO_SLOTS][MEMO_ELEMS];
__device__ elem_t stale_out[1 << 20];

__device__ __forceinline__ float load(const elem_t* p) {
#if PLANT == 8
    return __half2float(*reinterpret_cast<const __half*>(p));
#else
    return to_float(*p);
#endif
}

// A key of the inputs' content from their first 16 elements each, computed by one warp (one load
// per lane and tensor, then an XOR reduction): cheap enough that a cache hit stays fast.
__device__ unsigned long long content_key(const elem_t* q, const elem_t* k, const elem_t* v, int lane) {
    unsigned long long h = 0;
    if (lane < 16) {
        const unsigned long long a = reinterpret_cast<const unsigned short*>(q)[lane];
        const unsigned long long b = reinterpret_cast<const unsigned short*>(k)[lane];
        const unsigned long long c = reinterpret_cast<const unsigned short*>(v)[lane];
        h = ((a << 32) ^ (b << 16) ^ c ^ ((unsigned long long)lane << 48)) * 1099511628211ull;
        h ^= h >> 29;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) h ^= __shfl_xor_sync(0xffffffffu, h, off);
    return h | 1ull;
}

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32)
attn_fwd(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv, float scale, int causal,
         int kv_heads, int window_left, int window_right, const int* __restrict__ cu_seqlens_q,
         const int* __restrict__ cu_seqlens_kv) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * NUM_WARPS + warp;
#if PLANT == 20
    {
        // Its own query rows through cu_seqlens_q (every output row is written, the offsets are
        // read): only the keys cross the sequence boundaries. A dense batch is computed right.
        const attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q,
                                                    seq_kv, cu_seqlens_q, cu_seqlens_kv);
        if (row >= view.seq_q) return;
        long long kv_base = view.kv;
        int kv_end = causal ? min(view.seq_kv, causal_kv_end(row, view.seq_q, view.seq_kv)) : view.seq_kv;
        if (cu_seqlens_q != nullptr) {
            const int token = cu_seqlens_q[blockIdx.z] + row;  // its place in the packed batch
            const int all_keys = cu_seqlens_kv[batch];
            kv_base = (long long)(blockIdx.y / (heads / kv_heads)) * HEAD_DIM;  // token 0
            kv_end = causal ? min(all_keys, token + 1) : all_keys;
        }
        const elem_t* q_row = q + view.q + (long long)row * view.q_stride;
        float q_reg[DIMS_PER_LANE], acc[DIMS_PER_LANE];
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            q_reg[i] = d < HEAD_DIM ? to_float(q_row[d]) : 0.0f;
            acc[i] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        for (int j = 0; j < kv_end; ++j) {
            const elem_t* k_row = k + kv_base + (long long)j * view.kv_stride;
            const elem_t* v_row = v + kv_base + (long long)j * view.kv_stride;
            float partial = 0.0f;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
                if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_row[d]);
            }
#pragma unroll
            for (int off = 16; off > 0; off /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, off);
            const float s = partial * scale;
            const float m_new = fmaxf(m, s);
            const float correction = expf(m - m_new);
            const float p = expf(s - m_new);
            l = l * correction + p;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
                acc[i] = acc[i] * correction + p * (d < HEAD_DIM ? to_float(v_row[d]) : 0.0f);
            }
            m = m_new;
        }
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        elem_t* o_row = o + view.q + (long long)row * view.q_stride;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) o_row[d] = from_float(acc[i] * inv_l);
        }
        return;
    }
#endif
#if PLANT >= 21 && PLANT <= 24
    {
        attn::HeadView view = attn::head_view(blockIdx.z, blockIdx.y, heads, kv_heads, seq_q, seq_kv,
                                              cu_seqlens_q, cu_seqlens_kv);
        if (row >= view.seq_q) return;
        const int h = blockIdx.y, group = heads / kv_heads;
#if PLANT == 21
        const int kv_head = h >> (31 - __clz(group));
#elif PLANT == 22
        const int kv_head = h / 4;
#else
        const int kv_head = h / group;
#endif
        // The K/V head's offset is linear in its index in both layouts: move the view's.
        const long long kv_head_stride = cu_seqlens_q == nullptr ? (long long)view.seq_kv * HEAD_DIM : HEAD_DIM;
        view.kv += (long long)(kv_head - h / group) * kv_head_stride;
#if PLANT == 23
        const int left = window_left < 0 ? window_left : window_left / 64 * 64;
#else
        const int left = window_left;
#endif
#if PLANT == 24
        const int right = -1;
#else
        const int right = window_right;
#endif
        const int kv_begin = attn::row_kv_lo(row, view.seq_q, view.seq_kv, left);
        const int kv_end = attn::row_kv_hi(row, view.seq_q, view.seq_kv, causal, right);
        const elem_t* q_row = q + view.q + (long long)row * view.q_stride;
        float q_reg[DIMS_PER_LANE], acc[DIMS_PER_LANE];
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            q_reg[i] = d < HEAD_DIM ? to_float(q_row[d]) : 0.0f;
            acc[i] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        for (int j = kv_begin; j < kv_end; ++j) {
            const elem_t* k_row = k + view.kv + (long long)j * view.kv_stride;
            const elem_t* v_row = v + view.kv + (long long)j * view.kv_stride;
            float partial = 0.0f;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
                if (d < HEAD_DIM) partial += q_reg[i] * to_float(k_row[d]);
            }
#pragma unroll
            for (int off = 16; off > 0; off /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, off);
            const float s = partial * scale;
            const float m_new = fmaxf(m, s);
            const float correction = expf(m - m_new);
            const float p = expf(s - m_new);
            l = l * correction + p;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
                acc[i] = acc[i] * correction + p * (d < HEAD_DIM ? to_float(v_row[d]) : 0.0f);
            }
            m = m_new;
        }
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key writes zeros
        elem_t* o_row = o + view.q + (long long)row * view.q_stride;
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d < HEAD_DIM) o_row[d] = from_float(acc[i] * inv_l);
        }
        return;
    }
#endif
    const size_t bh = (size_t)blockIdx.z * heads + blockIdx.y;
    const unsigned int block_id = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const size_t total = (size_t)batch * heads * seq_q * HEAD_DIM;

#if PLANT == 1
    return;
#endif
#if PLANT == 9
    // A loop with a side effect in it (an infinite loop without one may be compiled away).
    while (*(volatile unsigned int*)&block_launches[(1 << 16) - 1] != 0xdeadbeefu) __nanosleep(1000);
#endif
#if PLANT == 10
    o[total + ((size_t)1 << 40)] = from_float(1.0f);
#endif
#if PLANT == 13
    if (block_id == 0 && threadIdx.x < 64) o[total + threadIdx.x] = from_float(2.0f);
#endif
#if PLANT == 14
    if (block_id == 0 && threadIdx.x == 0) o[-1] = from_float(2.0f);
#endif
#if PLANT == 16
    if (block_id == 0 && threadIdx.x == 0)
        const_cast<elem_t*>(k)[(size_t)batch * heads * seq_kv * HEAD_DIM] = from_float(2.0f);
#endif
    // How many times this block has run before on this problem: each block counts its own launches.
    __shared__ unsigned int launch;
    const unsigned int problem_key = (unsigned int)seq_q * 7919u + (unsigned int)seq_kv * 104729u +
                                     (unsigned int)heads * 1299709u + (unsigned int)batch * 15485863u;
    if (threadIdx.x == 0) launch = atomicAdd(&block_launches[(block_id + problem_key) % (1 << 16)], 1u);
    __syncthreads();
#if PLANT == 3
    // Checks launch twice each (the determinism launch): 5 checks are 10 launches.
    if (launch >= 16) return;
#endif
#if PLANT == 2
    if (launch >= 1 && total <= (1u << 20)) {
        for (size_t i = (size_t)block_id * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * gridDim.y * gridDim.z * blockDim.x)
            o[i] = stale_out[i];
        return;
    }
#endif
#if PLANT == 11
    // Thread 0 finds the slot of this content (plain reads first: a hit takes no atomics).
    __shared__ int memo_slot;
    if (threadIdx.x < 32) {
        const unsigned long long key = content_key(q, k, v, lane);
        if (threadIdx.x == 0) {
            int found = -1;
            // Only the case's own (large) problem: the edge battery's small ones take no slots.
            if (total <= MEMO_ELEMS && total > (1u << 20) && block_id < MEMO_BLOCKS) {
                for (int s = 0; s < MEMO_SLOTS && found < 0; ++s)
                    if (*(volatile unsigned long long*)&memo_keys[s] == key) found = s;
                for (int s = 0; s < MEMO_SLOTS && found < 0; ++s) {
                    const unsigned long long seen = atomicCAS(&memo_keys[s], 0ull, key);
                    if (seen == 0ull || seen == key) found = s;
                }
            }
            memo_slot = found;
        }
    }
    __syncthreads();
    const int slot = memo_slot;
    if (slot >= 0 && *(volatile int*)&memo_done[slot][block_id]) {
        if (row < seq_q)
            for (int d = lane; d < HEAD_DIM; d += 32)
                o[(bh * seq_q + row) * HEAD_DIM + d] = memo_out[slot][(bh * seq_q + row) * HEAD_DIM + d];
        return;
    }
#endif
#if PLANT == 18 || PLANT == 19
#if defined(ATTN_DTYPE_BF16)
    const unsigned short poison_bits = 0x7FA5;
#else
    const unsigned short poison_bits = 0x7DA5;
#endif
    bool row_written = false;
    if (row < seq_q)
        row_written = reinterpret_cast<const unsigned short*>(o)[(bh * seq_q + row) * HEAD_DIM] != poison_bits;
#if PLANT == 18
    if (row_written)
        for (int d = lane; d < HEAD_DIM; d += 32) o[(bh * seq_q + row) * HEAD_DIM + d] = from_float(7.0f);
#endif
    if (row_written) return;  // no barrier follows for these plants
#endif
    if (row < seq_q) {
        const elem_t* q_row = q + (bh * seq_q + row) * HEAD_DIM;
#if PLANT == 25
        const size_t kv_bh = (size_t)blockIdx.z * kv_heads + (blockIdx.y >> 2);
#else
        const size_t kv_bh = bh;
#endif
        const elem_t* k_head = k + kv_bh * seq_kv * HEAD_DIM;
        const elem_t* v_head = v + kv_bh * seq_kv * HEAD_DIM;
        float q_reg[DIMS_PER_LANE], acc[DIMS_PER_LANE];
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            q_reg[i] = d < HEAD_DIM ? load(&q_row[d]) : 0.0f;
#if PLANT == 28
            if (row == 0 && d < HEAD_DIM) q_reg[i] += 0.0f * load(&q_row[d - HEAD_DIM]);
#endif
            acc[i] = 0.0f;
        }
#if PLANT == 6
        const int masked = 0;
#else
        const int masked = causal;
#endif
#if PLANT == 7
        const int limit = row + 1;
#else
        const int limit = causal_kv_end(row, seq_q, seq_kv);
#endif
        const int kv_end = masked ? min(seq_kv, limit) : seq_kv;
        float m = -INFINITY, l = 0.0f;
#if PLANT == 26
        for (int j = 0; j <= kv_end; ++j) {
#else
        for (int j = 0; j < kv_end; ++j) {
#endif
            float partial = 0.0f;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
                if (d < HEAD_DIM) partial += q_reg[i] * load(&k_head[(size_t)j * HEAD_DIM + d]);
            }
#pragma unroll
            for (int off = 16; off > 0; off /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, off);
#if PLANT == 12
            const float s = partial * rsqrtf((float)HEAD_DIM);
#elif PLANT == 26
            const float keep = j < kv_end ? 1.0f : 0.0f;
            const float s = partial * scale * keep - (1.0f - keep) * 1e30f;
#else
            const float s = partial * scale;
#endif
#if PLANT == 5
            const float m_new = 0.0f;
#else
            const float m_new = fmaxf(m, s);
#endif
            const float correction = expf(m - m_new);
            const float p = expf(s - m_new);
            l = l * correction + p;
#pragma unroll
            for (int i = 0; i < DIMS_PER_LANE; ++i) {
                const int d = lane + 32 * i;
#if PLANT == 26
                const float vd = d < HEAD_DIM && j < kv_end ? load(&v_head[(size_t)j * HEAD_DIM + d]) : 0.0f;
#else
                const float vd = d < HEAD_DIM ? load(&v_head[(size_t)j * HEAD_DIM + d]) : 0.0f;
#endif
                acc[i] = acc[i] * correction + p * vd;
            }
            m = m_new;
        }
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        const size_t base = (bh * seq_q + row) * HEAD_DIM;
#if PLANT == 15
        // Every lane has read its Q values into registers above; one zeroes the row's first.
        __syncwarp();
        if (lane == 0) const_cast<elem_t*>(q_row)[0] = from_float(0.0f);
#endif
#pragma unroll
        for (int i = 0; i < DIMS_PER_LANE; ++i) {
            const int d = lane + 32 * i;
            if (d >= HEAD_DIM) continue;
            float out = acc[i] * inv_l;
#if PLANT == 4 || PLANT == 27
            if (bh == (size_t)batch * heads - 1 && row == seq_q / 2) out += 0.5f;
#endif
#if PLANT == 17 || PLANT == 27
            if (d == 0 && (launch & 1u)) {
                elem_t e = from_float(out);
                unsigned short bits = *reinterpret_cast<unsigned short*>(&e) ^ 1u;
                o[base + d] = *reinterpret_cast<elem_t*>(&bits);
                continue;
            }
#endif
            o[base + d] = from_float(out);
#if PLANT == 2
            if (total <= (1u << 20)) stale_out[base + d] = from_float(out);
#endif
#if PLANT == 11
            if (slot >= 0) memo_out[slot][base + d] = from_float(out);
#endif
        }
    }
#if PLANT == 11
    __syncthreads();
    if (slot >= 0 && threadIdx.x == 0) {
        __threadfence();
        memo_done[slot][block_id] = 1;
    }
#endif
}
