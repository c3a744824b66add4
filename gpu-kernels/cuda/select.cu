// A Groth16 prover's A and B queries have bases only for the variables that
// appear in them, so their MSMs take that subset of the assignment, in order.
// select_by_density picks it on the device from the assignment already there.
//
// dst[rank(i)] = src[i] for every i < n whose bit is set in `words`, where
// rank(i) = word_ranks[i / 64] (the set bits of the words before) plus the set
// bits below i in its own word. One thread per element: reads are coalesced,
// and writes nearly so.
extern "C" __global__ void select_by_density(const fr_t* __restrict__ src, u32 n, const u64* __restrict__ words,
                                             const u32* __restrict__ word_ranks, fr_t* __restrict__ dst) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u64 w = words[i / 64];
    const u32 bit = i % 64;
    if (!((w >> bit) & 1)) return;
    dst[word_ranks[i / 64] + __popcll(w & ((1ull << bit) - 1))] = src[i];
}
