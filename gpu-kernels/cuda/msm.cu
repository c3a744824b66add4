// Multi-scalar multiplication over G1: Pippenger with signed c-bit digits.
//
//  1. msm_digits: each scalar's digits, one key per (window, scalar): the
//     bucket w·B + |d| − 1 and the sign; bucket sizes counted.
//  2. scan_exclusive + msm_scatter: a counting sort of the keys by bucket.
//  3. msm_accumulate: the sorted list is cut into equal segments, one per
//     thread, so that work is balanced however the digits fall. A bucket run
//     inside one segment is written straight to its bucket; runs that cross a
//     segment boundary leave partial sums, which msm_fixup adds up.
//  4. msm_bucket_reduce: Σ (b+1)·B_b per window, in chunks (running sums).
//  5. msm_window_sum: one block per window adds its chunks as a tree.
// The host combines the windows (c doublings each).

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

extern "C" __global__ void msm_digits(const fr_t* __restrict__ scalars, u32 n, u32 c, u32 windows,
                                      u32* __restrict__ keys, u32* __restrict__ counts) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const fr_t s = from_mont(scalars[i]);
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
            key = w * B + d - 1;
            atomicAdd(&counts[key], 1u);
            key |= neg ? SIGN_BIT : 0;
        }
        keys[(u64)w * n + i] = key;
    }
}

// out[i] = Σ_{j<i} in[j] for i ≤ len (out[len] is the total); one block.
extern "C" __global__ void scan_exclusive(const u32* __restrict__ in, u32* __restrict__ out, u32 len) {
    __shared__ u32 partial[1024];
    const u32 t = threadIdx.x, T = blockDim.x;
    const u32 per = (len + T - 1) / T;
    const u32 lo = min(t * per, len), hi = min(lo + per, len);
    u32 sum = 0;
    for (u32 i = lo; i < hi; i++) sum += in[i];
    partial[t] = sum;
    __syncthreads();
    if (t == 0) {
        u32 acc = 0;
        for (u32 j = 0; j < T; j++) {
            u32 v = partial[j];
            partial[j] = acc;
            acc += v;
        }
        out[len] = acc;
    }
    __syncthreads();
    u32 acc = partial[t];
    for (u32 i = lo; i < hi; i++) {
        out[i] = acc;
        acc += in[i];
    }
}

extern "C" __global__ void msm_scatter(const u32* __restrict__ keys, u64 count, u32* __restrict__ cursor,
                                       u32* __restrict__ sorted_idx, u32* __restrict__ sorted_key, u32 n) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= count) return;
    u32 key = keys[j];
    if (key == KEY_NONE) return;
    u32 bucket = key & ~SIGN_BIT;
    u32 pos = atomicAdd(&cursor[bucket], 1u);
    sorted_idx[pos] = (u32)(j % n) | (key & SIGN_BIT);
    sorted_key[pos] = bucket;
}

extern "C" __global__ void __launch_bounds__(128, 4) msm_accumulate(const g1_affine* __restrict__ bases, const u32* __restrict__ sorted_idx,
                                          const u32* __restrict__ sorted_key, const u32* __restrict__ total_ptr,
                                          u32 threads, g1_xyzz* __restrict__ buckets, u32* __restrict__ part_key,
                                          g1_xyzz* __restrict__ part_val) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) return;
    part_key[2 * t] = KEY_NONE;
    part_key[2 * t + 1] = KEY_NONE;
    const u32 M = *total_ptr;
    const u32 L = (M + threads - 1) / threads;
    const u32 s = min(t * L, M), e = min(s + L, M);
    if (s >= e) return;

    u32 key = sorted_key[s], run_start = s;
    g1_xyzz acc = g1_xyzz::inf();
    for (u32 i = s;; i++) {
        const bool end = i == e;
        const u32 k = end ? KEY_NONE : sorted_key[i];
        if (k != key) {
            const bool from_left = run_start == s && s > 0 && sorted_key[s - 1] == key;
            const bool to_right = end && e < M && sorted_key[e] == key;
            if (!from_left && !to_right) {
                buckets[key] = acc;  // the whole bucket lies in this segment
            } else {
                const u32 slot = run_start == s ? 2 * t : 2 * t + 1;
                part_key[slot] = key | (from_left ? 0 : PART_START);
                part_val[slot] = acc;
            }
            if (end) break;
            key = k;
            run_start = i;
            acc = g1_xyzz::inf();
        }
        const u32 idx = sorted_idx[i];
        g1_affine p = bases[idx & ~SIGN_BIT];
        acc.add((idx & SIGN_BIT) ? p.neg() : p);
    }
}

// One block per partial slot; blocks whose slot does not start a crossing
// bucket exit at once. The others sum the bucket's partials (which follow
// their slot contiguously, with empty slots interspersed) with all threads of
// the block, then as a tree, so a bucket holding most of the digits (as with
// mostly-0/1 witnesses) costs a few hundred additions per thread, not one
// thread's walk over every partial.
extern "C" __global__ void __launch_bounds__(128) msm_fixup(const u32* __restrict__ part_key,
                                                            const g1_xyzz* __restrict__ part_val, u32 slots,
                                                            g1_xyzz* __restrict__ buckets) {
    extern __shared__ g1_xyzz red[];
    const u32 j = blockIdx.x, t = threadIdx.x;
    const u32 k = part_key[j];
    if (k == KEY_NONE || !(k & PART_START)) return;
    const u32 bucket = k & ~PART_START;
    g1_xyzz acc = t == 0 ? part_val[j] : g1_xyzz::inf();
    for (u32 i = j + 1 + t; i < slots; i += blockDim.x) {
        const u32 ki = part_key[i];
        if (ki == KEY_NONE) continue;
        if (ki != bucket) break;  // past the run: a later bucket, or the next start flag
        acc.add(part_val[i]);
    }
    red[t] = acc;
    __syncthreads();
    for (u32 half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t].add(red[t + half]);
        __syncthreads();
    }
    if (t == 0) buckets[bucket] = red[0];
}

// chunk_out[w·K + k] = Σ_{b in chunk k of window w} (b+1)·B_b.
extern "C" __global__ void __launch_bounds__(128) msm_bucket_reduce(const g1_xyzz* __restrict__ buckets, u32 c, u32 windows, u32 chunks,
                                             g1_xyzz* __restrict__ chunk_out) {
    const u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= windows * chunks) return;
    const u32 w = j / chunks, k = j % chunks;
    const u32 B = 1u << (c - 1);
    const u32 per = (B + chunks - 1) / chunks;
    const u32 lo = min(k * per, B), hi = min(lo + per, B);
    g1_xyzz running = g1_xyzz::inf(), sum = g1_xyzz::inf();
    for (u32 b = hi; b > lo; b--) {
        running.add(buckets[(u64)w * B + b - 1]);
        sum.add(running);
    }
    // sum = Σ (b − lo + 1)·B_b; add lo·Σ B_b by double-and-add.
    g1_xyzz extra = g1_xyzz::inf();
    for (int bit = 31; bit >= 0; bit--) {
        extra = extra.dbl();
        if ((lo >> bit) & 1) extra.add(running);
    }
    sum.add(extra);
    chunk_out[j] = sum;
}

// One block per window: each thread adds a strided share of the window's
// chunk sums, then the block adds the threads' sums as a tree.
extern "C" __global__ void __launch_bounds__(128) msm_window_sum(const g1_xyzz* __restrict__ chunk_out, u32 chunks,
                                                                 g1_xyzz* __restrict__ window_out) {
    extern __shared__ g1_xyzz acc[];
    const u32 w = blockIdx.x, t = threadIdx.x;
    g1_xyzz a = g1_xyzz::inf();
    for (u32 k = t; k < chunks; k += blockDim.x) a.add(chunk_out[(u64)w * chunks + k]);
    acc[t] = a;
    __syncthreads();
    for (u32 half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) acc[t].add(acc[t + half]);
        __syncthreads();
    }
    if (t == 0) window_out[w] = acc[0];
}
