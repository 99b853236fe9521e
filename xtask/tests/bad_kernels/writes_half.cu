// Bad kernel: computes exact rows, but only the first half of them.
#include "exact_rows.cuh"
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch, int heads,
                                    int seq_q, int seq_kv, float scale, int causal) {
    const int row = ROW_OF_THREAD;
    if (threadIdx.x < 64 && row < seq_q / 2) exact_row(q, k, v, o, BH_OF_BLOCK, row, seq_q, seq_kv, scale, causal);
}
