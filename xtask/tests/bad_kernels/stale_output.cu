// Bad kernel: computes the first call's output exactly and keeps it; every later call replays that
// stale output whatever its inputs. Each block takes a ticket: tickets below the block count mean
// "first launch".
#include "exact_rows.cuh"
#define MAX_ELEMS (1 << 20)
__device__ elem_t saved[MAX_ELEMS];
__device__ unsigned int tickets;
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch, int heads,
                                    int seq_q, int seq_kv, float scale, int causal) {
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(&tickets, 1u);
    __syncthreads();
    const bool first_launch = ticket < gridDim.x * gridDim.y * gridDim.z;
    const int row = ROW_OF_THREAD;
    if (threadIdx.x >= 64 || row >= seq_q) return;
    const size_t bh = BH_OF_BLOCK;
    elem_t* o_row = o + (bh * seq_q + row) * HEAD_DIM;
    if (first_launch) exact_row(q, k, v, o, bh, row, seq_q, seq_kv, scale, causal);
    for (int d = 0; d < HEAD_DIM; ++d) {
        const size_t i = (bh * seq_q + row) * HEAD_DIM + d;
        if (i >= MAX_ELEMS) return;
        if (first_launch) saved[i] = o_row[d]; else o_row[d] = saved[i];
    }
}
