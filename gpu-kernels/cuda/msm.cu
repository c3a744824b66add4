// Multi-scalar multiplication over G1 and G2: Pippenger with signed c-bit
// digits. The digit, scan and scatter kernels serve both groups; the point
// kernels are templates instantiated per group (MSM_KERNELS).
//
// Two layouts of bases: plain (each window has its own B = 2^(c−1) buckets,
// and the host combines the window sums with c doublings each), or shifted
// (G1: a table holding 2^(c·w)·P for every window w, precomputed once by
// msm_shift_bases: every window's digits then go into one set of buckets,
// so a wider window costs one bucket reduction, not one per window).
//
//  1. msm_digits: each scalar's digits, one key per (window, scalar): the
//     bucket (w·B or 0) + |d| − 1 and the sign; bucket sizes counted (one
//     atomic per bucket a warp touches).
//  2. scan + msm_scatter: a counting sort of the keys by bucket (the scatter
//     in passes over bucket ranges, each small enough for L2).
//  3. msm_accumulate: the sorted list is cut into equal segments, one per
//     thread, so that work is balanced however the digits fall. A bucket run
//     inside one segment is written straight to its bucket; runs that cross a
//     segment boundary leave partial sums, which msm_fixup (a thread per
//     bucket) and msm_fixup_long (a block per bucket with many) add up.
//  4. msm_bucket_reduce: Σ (b+1)·B_b per bucket set, in chunks (running sums).
//  5. msm_sum_groups, repeated: the chunk sums added as trees, one block per
//     group, until one sum per bucket set is left.
//
// A witness's scalars are mostly 0 and 1 (a 32 GiB PoRep partition's L and A:
// ~51% zero, ~47% one, ~1% wider). Plain bases first pass through
// msm_classify, which lists the ones and the wider terms; where at most half
// are wider, the ones are summed straight (msm_sum_listed, then
// msm_sum_groups) and only the wider terms go through steps 1–5, their
// scalars and bases read through the list (msm_digits_mapped,
// msm_scatter_mapped). Zeros cost nothing.

#define KEY_NONE 0xffffffffu
#define SIGN_BIT 0x80000000u
#define PART_START 0x80000000u

// Canonical (non-Montgomery) limbs of a scalar: x·1·R⁻¹.
DEVICE fr_t from_mont(const fr_t& x) {
    fr_t one_raw = fr_t::zero();
    one_raw.v[0] = 1;
    return x * one_raw;
}

DEVICE u32 bits_at(const fr_t& s, u32 pos, u32 c) {
    u32 limb = pos / 32, off = pos % 32;
    u64 w = s.v[limb];
    if (limb + 1 < 8) w |= (u64)s.v[limb + 1] << 32;
    return (u32)(w >> off) & ((1u << c) - 1);
}

// Lane masks of the calling warp: the lanes whose `key` equals this lane's,
// and the first of them. A digit most scalars share (a mostly-0/1 witness
// puts its ones in one bucket: ~47% of a 32 GiB partition's L and A terms)
// would otherwise serialise tens of millions of atomics on one address.
struct Peers {
    u32 mask, leader, lane;
};

DEVICE Peers peers_of(u32 key) {
    Peers p;
    p.mask = __match_any_sync(__activemask(), key);
    p.leader = __ffs(p.mask) - 1;
    p.lane = threadIdx.x % 32;
    return p;
}

// counts[key] += 1 for every calling lane: one atomic per distinct key in the warp.
DEVICE void count_once_per_warp(u32* counts, u32 key) {
    const Peers p = peers_of(key);
    if (p.lane == p.leader) atomicAdd(&counts[key], __popc(p.mask));
}

// A distinct slot from cursor[key] for every calling lane (cursor[key] is
// advanced by the count): one atomic per distinct key in the warp.
DEVICE u32 claim_once_per_warp(u32* cursor, u32 key) {
    const Peers p = peers_of(key);
    u32 base = 0;
    if (p.lane == p.leader) base = atomicAdd(&cursor[key], __popc(p.mask));
    base = __shfl_sync(p.mask, base, p.leader);
    return base + __popc(p.mask & ((1u << p.lane) - 1));
}

// Term i of an MSM: i itself, or map[i] where the MSM sums the wider terms
// msm_classify listed.
template <bool MAPPED>
DEVICE u32 term(const u32* __restrict__ map, u32 i) {
    return MAPPED ? map[i] : i;
}

template <bool MAPPED>
DEVICE void digits(const fr_t* __restrict__ scalars, const u32* __restrict__ map, u32 n, u32 c, u32 windows,
                   u32 shared_buckets, u32* __restrict__ keys, u32* __restrict__ counts) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t s = from_mont(scalars[term<MAPPED>(map, i)]);
    const u32 B = 1u << (c - 1);
    u32 carry = 0;
    for (u32 w = 0; w < windows; w++) {
        u32 pos = w * c;
        u32 d = (pos < 256 ? bits_at(s, pos, c) : 0) + carry;
        u32 neg = 0;
        carry = 0;
        if (d > B) {
            d = (1u << c) - d;  // digit d − 2^c, negative
            neg = 1;
            carry = 1;
        }
        u32 key = KEY_NONE;
        if (d != 0) {
            key = (shared_buckets ? 0 : w * B) + d - 1;
            count_once_per_warp(counts, key);
            key |= neg ? SIGN_BIT : 0;
        }
        keys[(u64)w * n + i] = key;
    }
}

extern "C" __global__ void msm_digits(const fr_t* __restrict__ scalars, u32 n, u32 c, u32 windows,
                                      u32 shared_buckets, u32* __restrict__ keys, u32* __restrict__ counts) {
    digits<false>(scalars, nullptr, n, c, windows, shared_buckets, keys, counts);
}

extern "C" __global__ void msm_digits_mapped(const fr_t* __restrict__ scalars, const u32* __restrict__ map, u32 n,
                                             u32 c, u32 windows, u32 shared_buckets, u32* __restrict__ keys,
                                             u32* __restrict__ counts) {
    digits<true>(scalars, map, n, c, windows, shared_buckets, keys, counts);
}

// A slot for every calling lane whose `take` holds, from *cursor (advanced by
// their number): one atomic a warp.
DEVICE u32 append_once_per_warp(u32* cursor, bool take) {
    const u32 mask = __ballot_sync(__activemask(), take);
    if (!take) return 0;
    const u32 lane = threadIdx.x % 32, leader = __ffs(mask) - 1;
    u32 base = 0;
    if (lane == leader) base = atomicAdd(cursor, __popc(mask));
    base = __shfl_sync(mask, base, leader);
    return base + __popc(mask & ((1u << lane) - 1));
}

// Lists the terms whose scalar is 1 from the front of `list` (counts[0] of
// them) and those wider than 1 from its back (counts[1]); zeros are left out.
// The scalars are compared in Montgomery form, as stored.
extern "C" __global__ void msm_classify(const fr_t* __restrict__ scalars, u32 n, u32* __restrict__ list,
                                        u32* __restrict__ counts) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t s = scalars[i];
    const bool one = s == fr_t::one();
    const bool wide = !one && !s.is_zero();
    const u32 a = append_once_per_warp(&counts[0], one);
    const u32 b = append_once_per_warp(&counts[1], wide);
    if (one) list[a] = i;
    if (wide) list[n - 1 - b] = i;
}

// Exclusive prefix sums out[i] = Σ_{j<i} in[j] for i ≤ len (out[len] is the
// total), in three launches: scan_tile_sums (one total per tile of
// SCAN_TILE), scan_exclusive over those totals (one block), scan_tiles (each
// tile rescanned from its offset).
#define SCAN_THREADS 1024u
#define SCAN_TILE (16u * SCAN_THREADS)

// Block-wide exclusive scan of one value per thread; returns this thread's
// prefix and sets *total. Needs SCAN_THREADS threads.
DEVICE u32 block_exclusive_scan(u32 v, u32* total) {
    __shared__ u32 warp_sums[32];
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    u32 x = v;
#pragma unroll
    for (u32 d = 1; d < 32; d *= 2) {
        u32 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u32 w = warp_sums[lane];
#pragma unroll
        for (u32 d = 1; d < 32; d *= 2) {
            u32 y = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += y;
        }
        warp_sums[lane] = w;
    }
    __syncthreads();
    const u32 before = (warp ? warp_sums[warp - 1] : 0) + x - v;
    *total = warp_sums[31];
    __syncthreads();  // warp_sums is reused by the next call
    return before;
}

extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_tile_sums(const u32* __restrict__ in, u32 len,
                                                                           u32* __restrict__ sums) {
    const u32 lo = blockIdx.x * SCAN_TILE, hi = min(lo + SCAN_TILE, len);
    u32 v = 0;
    for (u32 i = lo + threadIdx.x; i < hi; i += SCAN_THREADS) v += in[i];
    u32 total;
    block_exclusive_scan(v, &total);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// Scans in[lo..hi) into out[lo..hi) from `carry`, a block-wide round at a
// time; returns the running total. Every thread of the block calls it.
DEVICE u32 scan_range(const u32* __restrict__ in, u32* __restrict__ out, u32 lo, u32 hi, u32 carry) {
    for (u32 base = lo; base < hi; base += SCAN_THREADS) {
        const u32 i = base + threadIdx.x;
        const u32 v = i < hi ? in[i] : 0;
        u32 total;
        const u32 before = block_exclusive_scan(v, &total);
        if (i < hi) out[i] = carry + before;
        carry += total;
    }
    return carry;
}

// out[i] = Σ_{j<i} in[j] for i ≤ len; one block of SCAN_THREADS, for short inputs.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_exclusive(const u32* __restrict__ in,
                                                                           u32* __restrict__ out, u32 len) {
    const u32 total = scan_range(in, out, 0, len, 0);
    if (threadIdx.x == 0) out[len] = total;
}

extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_tiles(const u32* __restrict__ in, u32 len,
                                                                       const u32* __restrict__ tile_offsets,
                                                                       u32* __restrict__ out) {
    const u32 lo = blockIdx.x * SCAN_TILE, hi = min(lo + SCAN_TILE, len);
    const u32 end = scan_range(in, out, lo, hi, tile_offsets[blockIdx.x]);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) out[len] = end;
}

// One launch places the keys of buckets [lo, hi) only: the host makes as many
// passes as it takes for each pass's write positions (one partly written
// sector per bucket) and cursors to stay in L2; a write to a random sector
// that was evicted half written costs a DRAM read-modify-write.
template <bool MAPPED>
DEVICE void scatter(const u32* __restrict__ keys, const u32* __restrict__ map, u64 count, u32* __restrict__ cursor,
                    u32* __restrict__ sorted_idx, u32 n, u32 stride, u32 lo, u32 hi) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= count) return;
    u32 key = keys[j];
    if (key == KEY_NONE) return;
    u32 bucket = key & ~SIGN_BIT;
    if (bucket < lo || bucket >= hi) return;
    const u32 pos = claim_once_per_warp(cursor, bucket);
    sorted_idx[pos] = ((u32)(j / n) * stride + term<MAPPED>(map, (u32)(j % n))) | (key & SIGN_BIT);
}

extern "C" __global__ void msm_scatter(const u32* __restrict__ keys, u64 count, u32* __restrict__ cursor,
                                       u32* __restrict__ sorted_idx, u32 n, u32 stride, u32 lo, u32 hi) {
    scatter<false>(keys, nullptr, count, cursor, sorted_idx, n, stride, lo, hi);
}

extern "C" __global__ void msm_scatter_mapped(const u32* __restrict__ keys, const u32* __restrict__ map, u64 count,
                                              u32* __restrict__ cursor, u32* __restrict__ sorted_idx, u32 n,
                                              u32 stride, u32 lo, u32 hi) {
    scatter<true>(keys, map, count, cursor, sorted_idx, n, stride, lo, hi);
}

// The bucket whose run [offsets[b], offsets[b+1]) holds sorted position i:
// the last b ≥ lo with offsets[b] ≤ i (empty buckets have equal offsets and
// are passed over). Checks lo first: the next bucket is usually the one.
DEVICE u32 bucket_at(const u32* __restrict__ offsets, u32 lo, u32 nbuckets, u32 i) {
    if (offsets[lo + 1] > i) return lo;
    u32 hi = nbuckets;  // offsets[hi] = total > i
    while (hi - lo > 1) {
        const u32 mid = (lo + hi) / 2;
        if (offsets[mid] <= i) lo = mid; else hi = mid;
    }
    return lo;
}

// The point kernels are templates over the curve (affine input A, XYZZ
// accumulator X); MSM_KERNELS below instantiates them for G1 and G2.

// The sorted list carries no keys: a thread finds its buckets' runs from the
// scan's offsets, which halves the scatter's random writes.
template <class A, class X>
DEVICE void accumulate(const A* __restrict__ bases, const u32* __restrict__ sorted_idx,
                       const u32* __restrict__ offsets, u32 nbuckets, u32 threads, X* __restrict__ buckets,
                       u32* __restrict__ part_key, X* __restrict__ part_val) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) return;
    part_key[2 * t] = KEY_NONE;
    part_key[2 * t + 1] = KEY_NONE;
    const u32 M = offsets[nbuckets];
    const u32 L = (M + threads - 1) / threads;
    const u32 s = min(t * L, M), e = min(s + L, M);
    if (s >= e) return;

    u32 key = bucket_at(offsets, 0, nbuckets, s), run_start = s, run_end = offsets[key + 1];
    X acc = X::inf();
    for (u32 i = s;; i++) {
        const bool end = i == e;
        if (end || i == run_end) {
            const bool from_left = run_start == s && offsets[key] < s;
            const bool to_right = end && run_end > e;
            if (!from_left && !to_right) {
                buckets[key] = acc;  // the whole bucket lies in this segment
            } else {
                const u32 slot = run_start == s ? 2 * t : 2 * t + 1;
                part_key[slot] = key | (from_left ? 0 : PART_START);
                part_val[slot] = acc;
            }
            if (end) break;
            key = bucket_at(offsets, key + 1, nbuckets, i);
            run_start = i;
            run_end = offsets[key + 1];
            acc = X::inf();
        }
        const u32 idx = sorted_idx[i];
        A p = bases[idx & ~SIGN_BIT];
        acc.add((idx & SIGN_BIT) ? p.neg() : p);
    }
}

// Adds every thread's `acc` as a tree in shared memory (blockDim.x entries);
// the sum is in red[0]. Every thread of the block calls it.
template <class X>
DEVICE void block_tree_sum(X* red, const X& acc) {
    const u32 t = threadIdx.x;
    red[t] = acc;
    __syncthreads();
    for (u32 half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t].add(red[t + half]);
        __syncthreads();
    }
}

// Buckets whose runs cross segment boundaries get their partial sums added
// here. The partials of one bucket occupy consecutive slots, its first
// flagged PART_START, with empty slots interspersed. Most such buckets have
// two or three partials: one thread per slot adds them (fixup). A thread
// that finds no end within FIXUP_SCAN slots (a digit held by most scalars, as
// with mostly-0/1 witnesses) lists its bucket for fixup_long, whose blocks
// sum each listed bucket's partials with all their threads, then as a tree.
#define FIXUP_SCAN 16u

template <class X>
DEVICE void fixup(const u32* __restrict__ part_key, const X* __restrict__ part_val, u32 slots,
                  X* __restrict__ buckets, u32* __restrict__ long_starts, u32* __restrict__ long_count) {
    const u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= slots) return;
    const u32 k = part_key[j];
    if (k == KEY_NONE || !(k & PART_START)) return;
    const u32 bucket = k & ~PART_START;
    X acc = part_val[j];
    for (u32 i = j + 1; i < slots; i++) {
        if (i - j > FIXUP_SCAN) {
            long_starts[atomicAdd(long_count, 1u)] = j;
            return;
        }
        const u32 ki = part_key[i];
        if (ki == KEY_NONE) continue;
        if (ki != bucket) break;  // past the run: a later bucket, or the next start flag
        acc.add(part_val[i]);
    }
    buckets[bucket] = acc;
}

template <class X>
DEVICE void fixup_long(const u32* __restrict__ part_key, const X* __restrict__ part_val, u32 slots,
                       const u32* __restrict__ long_starts, const u32* __restrict__ long_count,
                       X* __restrict__ buckets, X* red) {
    const u32 t = threadIdx.x, listed = *long_count;
    for (u32 e = blockIdx.x; e < listed; e += gridDim.x) {
        const u32 j = long_starts[e];
        const u32 bucket = part_key[j] & ~PART_START;
        X acc = t == 0 ? part_val[j] : X::inf();
        for (u32 i = j + 1 + t; i < slots; i += blockDim.x) {
            const u32 ki = part_key[i];
            if (ki == KEY_NONE) continue;
            if (ki != bucket) break;
            acc.add(part_val[i]);
        }
        block_tree_sum(red, acc);  // ends with a barrier: red is free for the next bucket
        if (t == 0) buckets[bucket] = red[0];
    }
}

// chunk_out[w·K + k] = Σ_{b in chunk k of window w} (b+1)·B_b.
template <class X>
DEVICE void bucket_reduce(const X* __restrict__ buckets, u32 c, u32 windows, u32 chunks, X* __restrict__ chunk_out) {
    const u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= windows * chunks) return;
    const u32 w = j / chunks, k = j % chunks;
    const u32 B = 1u << (c - 1);
    const u32 per = (B + chunks - 1) / chunks;
    const u32 lo = min(k * per, B), hi = min(lo + per, B);
    X running = X::inf(), sum = X::inf();
    for (u32 b = hi; b > lo; b--) {
        running.add(buckets[(u64)w * B + b - 1]);
        sum.add(running);
    }
    // sum = Σ (b − lo + 1)·B_b; add lo·Σ B_b by double-and-add.
    X extra = X::inf();
    for (int bit = 31 - __clz(lo); bit >= 0; bit--) {  // from lo's top bit (none when lo = 0)
        extra = extra.dbl();
        if ((lo >> bit) & 1) extra.add(running);
    }
    sum.add(extra);
    chunk_out[j] = sum;
}

// out[w·G + g] = Σ of group g of set w, where set w is in[w·m .. (w+1)·m)
// and group g its elements [g·len, (g+1)·len); G = ⌈m / len⌉ groups per set.
// One block per group: each thread adds a strided share, then the block adds
// the threads' sums as a tree. Repeated until one sum per set is left.
template <class X>
DEVICE void sum_groups(const X* __restrict__ in, u32 m, u32 len, u32 groups, X* __restrict__ out, X* red) {
    const u32 w = blockIdx.x / groups, g = blockIdx.x % groups, t = threadIdx.x;
    const u32 lo = g * len, hi = min(lo + len, m);
    X a = X::inf();
    for (u32 k = lo + t; k < hi; k += blockDim.x) a.add(in[(u64)w * m + k]);
    block_tree_sum(red, a);
    if (t == 0) out[blockIdx.x] = red[0];
}

// out[t] = Σ bases[list[k]] over k ≡ t (mod threads), k < count: the
// bases whose scalar is 1. Strided, so that a warp reads neighbouring list
// entries, and so neighbouring bases.
template <class A, class X>
DEVICE void sum_listed(const A* __restrict__ bases, const u32* __restrict__ list, u32 count, X* __restrict__ out) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
    X acc = X::inf();
    for (u32 k = t; k < count; k += threads) acc.add(bases[list[k]]);
    out[t] = acc;
}

// The kernels of one curve. Launch bounds: G1 caps registers so that 4 (3)
// blocks of the accumulation (reduction) fit an SM (ncu: both FMA-bound);
// G2's accumulators are twice as wide and are left to the compiler.
extern __shared__ __align__(16) unsigned char msm_shared[];
#define MSM_KERNELS(SFX, A, X, ACC_BLOCKS, REDUCE_BLOCKS)                                                    \
    extern "C" __global__ void __launch_bounds__(128, ACC_BLOCKS)                                             \
        msm_accumulate##SFX(const A* __restrict__ bases, const u32* __restrict__ sorted_idx,                 \
                            const u32* __restrict__ offsets, u32 nbuckets, u32 threads, X* __restrict__ buckets, \
                            u32* __restrict__ part_key, X* __restrict__ part_val) {                          \
        accumulate<A, X>(bases, sorted_idx, offsets, nbuckets, threads, buckets, part_key, part_val);        \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128, ACC_BLOCKS)                                             \
        msm_sum_listed##SFX(const A* __restrict__ bases, const u32* __restrict__ list, u32 count,              \
                            X* __restrict__ out) {                                                            \
        sum_listed<A, X>(bases, list, count, out);                                                            \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) msm_fixup##SFX(                                        \
        const u32* __restrict__ part_key, const X* __restrict__ part_val, u32 slots, X* __restrict__ buckets, \
        u32* __restrict__ long_starts, u32* __restrict__ long_count) {                                        \
        fixup<X>(part_key, part_val, slots, buckets, long_starts, long_count);                               \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) msm_fixup_long##SFX(                                   \
        const u32* __restrict__ part_key, const X* __restrict__ part_val, u32 slots,                         \
        const u32* __restrict__ long_starts, const u32* __restrict__ long_count, X* __restrict__ buckets) {   \
        fixup_long<X>(part_key, part_val, slots, long_starts, long_count, buckets,                            \
                      reinterpret_cast<X*>(msm_shared));                                                      \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128, REDUCE_BLOCKS) msm_bucket_reduce##SFX(                 \
        const X* __restrict__ buckets, u32 c, u32 windows, u32 chunks, X* __restrict__ chunk_out) {           \
        bucket_reduce<X>(buckets, c, windows, chunks, chunk_out);                                             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) msm_sum_groups##SFX(const X* __restrict__ in, u32 m,    \
                                                                          u32 len, u32 groups,                \
                                                                          X* __restrict__ out) {              \
        sum_groups<X>(in, m, len, groups, out, reinterpret_cast<X*>(msm_shared));                            \
    }

MSM_KERNELS(, g1_affine, g1_xyzz, 4, 3)
MSM_KERNELS(_g2, g2_affine, g2_xyzz, 1, 1)

// table[k·n + i] = 2^(c·k)·table[i] for 0 < k < copies (affine; copy 0
// holds the bases, so that the table is all the memory this needs).
// One thread per point: the doublings run in Jacobian coordinates, the
// copies' X, Y parked in the table and their Z in local memory, and all
// copies are normalised with one inversion (Montgomery's trick).
#define SHIFT_MAX_COPIES 32u
extern "C" __global__ void __launch_bounds__(128) msm_shift_bases(u32 n, u32 c, u32 copies,
                                                                  g1_affine* __restrict__ table) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || copies > SHIFT_MAX_COPIES) return;
    const g1_affine p = table[i];
    if (p.is_inf()) {
        for (u32 k = 1; k < copies; k++) table[(u64)k * n + i] = p;
        return;
    }
    fp_t z[SHIFT_MAX_COPIES], prefix[SHIFT_MAX_COPIES];
    g1_jacobian j;
    j.X = p.x;
    j.Y = p.y;
    j.Z = fp_t::one();
    for (u32 k = 1; k < copies; k++) {
        for (u32 d = 0; d < c; d++) j = j.dbl();
        g1_affine parked;
        parked.x = j.X;
        parked.y = j.Y;
        table[(u64)k * n + i] = parked;
        z[k] = j.Z;
        prefix[k] = k == 1 ? j.Z : prefix[k - 1] * j.Z;
    }
    if (copies < 2) return;
    fp_t inv = prefix[copies - 1].inv();  // 1 / (Z_1 ⋯ Z_last)
    for (u32 k = copies - 1; k >= 1; k--) {
        const fp_t zi = k == 1 ? inv : inv * prefix[k - 1];  // 1 / Z_k
        inv = inv * z[k];
        const fp_t zi2 = zi.sqr();
        g1_affine q = table[(u64)k * n + i];
        q.x = q.x * zi2;
        q.y = q.y * (zi2 * zi);
        table[(u64)k * n + i] = q;
    }
}
