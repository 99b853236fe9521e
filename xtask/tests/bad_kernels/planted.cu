// Planted bad candidates for `cargo xtask evo` (knob MODE): 0 is correct (exact rows, see
// exact_rows.cuh), 1 writes far out of bounds (an illegal address), 2 never returns (a hang).
#include "exact_rows.cuh"
#ifndef MODE
#define MODE 0
#endif
__device__ volatile int never_set = 0;
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch, int heads,
                                    int seq_q, int seq_kv, float scale, int causal) {
#if MODE == 1
    if (threadIdx.x == 0) o[(size_t)1 << 40] = from_float(1.0f);  // 2 TiB past O: unmapped
#elif MODE == 2
    while (never_set == 0) {}  // a volatile read each turn: the loop cannot be optimised away
#endif
    const int row = ROW_OF_THREAD;
    if (threadIdx.x < 64 && row < seq_q) exact_row(q, k, v, o, BH_OF_BLOCK, row, seq_q, seq_kv, scale, causal);
}
