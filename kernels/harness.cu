// harness: the gate's own small kernels, which know nothing of attention (no dtype, no head dim).
//
// `checksum_words` sums a keyed hash of every 16-bit word of a buffer with its position (a sum:
// the order the threads add in does not matter, so the result is exact and reproducible). The gate
// checksums Q, K and V before and after every checked launch: a candidate that writes into its
// inputs changes them. With `invariant != 0` the position is the row (`i / row_len`) and the sign
// bit is ignored, so the checksum is unchanged by the signed column permutations the timing
// applies to its inputs between samples and can be compared across a whole timing.
//
// `clock_stamp` reads the SM's clock64() and %globaltimer once per thread block and writes
// (cycles, nanoseconds, SM id) at `out[3 * blockIdx.x]`. The gate launches twice as many blocks as
// SMs, each reserving the most dynamic shared memory a block may have (so one fits on an SM at a
// time and the first wave covers every SM), on the timed stream before and after each block of
// samples: paired by SM (clock64 counts for each SM alone), the two stamps give each SM's mean
// clock over the whole block of samples.

// Grids: checksum_words any (grid-stride loop, one atomic per warp); clock_stamp any, block (32).

#define MIX1 0xbf58476d1ce4e5b9ull
#define MIX2 0x94d049bb133111ebull
#define GOLDEN 0x9e3779b97f4a7c15ull

// splitmix64's finaliser: a bijection of 64-bit words (the host mirror is attn-kernels' guard.rs).
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * MIX1;
    z = (z ^ (z >> 27)) * MIX2;
    return z ^ (z >> 31);
}

extern "C" __global__ void checksum_words(const unsigned short* __restrict__ x, long long n, int row_len,
                                          int invariant, unsigned long long seed,
                                          unsigned long long* __restrict__ out) {
    unsigned long long acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long word = invariant ? (x[i] & 0x7fffu) : x[i];
        const unsigned long long pos = invariant ? (unsigned long long)(i / row_len) : (unsigned long long)i;
        acc += mix64(((pos << 16) | word) * GOLDEN + seed);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % 32 == 0 && acc != 0) atomicAdd(out, acc);
}

extern "C" __global__ void clock_stamp(unsigned long long* __restrict__ out) {
    if (threadIdx.x != 0) return;
    unsigned int smid;
    unsigned long long ns;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    const long long cycles = clock64();
    out[3 * blockIdx.x] = (unsigned long long)cycles;
    out[3 * blockIdx.x + 1] = ns;
    out[3 * blockIdx.x + 2] = smid;
}
