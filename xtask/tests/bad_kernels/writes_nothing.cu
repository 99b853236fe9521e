// Bad kernel: returns without writing O.
#include "attn_common.cuh"
extern "C" __global__ void attn_fwd(const elem_t* q, const elem_t* k, const elem_t* v, elem_t* o, int batch, int heads,
                                    int seq_q, int seq_kv, float scale, int causal) {}
