// NTT over Fr on device-resident data.
//
// Radix-2 stages grouped into passes of up to 10 stages that run in shared
// memory. DIF passes (Gentleman–Sande) take natural order to bit-reversed
// order; DIT passes (Cooley–Tukey) take bit-reversed order back to natural.
// The H chain (iNTT → coset NTT → pointwise → inverse coset NTT) pairs them so
// that it needs no bit-reversal pass at all.
//
// A pass with k stages whose smallest half-size is h_lo touches, per group,
// the 2^k elements base + r + j·h_lo (j < 2^k). A block takes R consecutive
// groups (consecutive r), so that a warp's loads are contiguous.

DEVICE u32 bitrev(u32 i, u32 log_n) {
    return log_n == 0 ? 0 : __brev(i) >> (32 - log_n);
}

// tw[e] = ω^e for e < n/2. The inverse twiddle ω^−e is −ω^(n/2−e).
template <bool INVERSE>
DEVICE fr_t twiddle(const fr_t* __restrict__ tw, u32 e, u32 half_n) {
    if (e == 0) return fr_t::one();
    return INVERSE ? tw[half_n - e].neg() : tw[e];
}

// One pass; the direction is a template parameter so that each variant's
// loop carries no flags. Shared memory: the block's E elements, then the
// twiddles of its k stages, staged once so that the rounds read no global
// memory.
//
// REVERSED_OUT (the last DIF pass only, h_lo = 1) writes to `out` at
// bit-reversed positions, so that a natural-order transform needs no separate
// reversal. Its block takes the groups q = blockIdx.x + rr·2^(G − log_r),
// G = log_n − k, whose reversed indices are consecutive in rr: each output
// row is a run of R elements.
template <bool DIT, bool INVERSE, bool REVERSED_OUT>
DEVICE void ntt_pass(const fr_t* in, fr_t* out, const fr_t* __restrict__ tw, u32 log_n, u32 log_hlo, u32 k,
                     u32 log_r) {
    extern __shared__ fr_t sh[];
    const u32 R = 1u << log_r;
    const u32 E = R << k;
    fr_t* const tws = sh + E;
    const u32 half_n = 1u << (log_n - 1);

    const u64 g0 = (u64)blockIdx.x << log_r;  // first group of this block
    const u64 q = g0 >> log_hlo;
    const u32 r0 = REVERSED_OUT ? 0 : (u32)(g0 & ((1u << log_hlo) - 1));
    const u64 base = (q << (log_hlo + k)) + r0;
    const u32 G = log_n - k;
    // Where element j of the block's group rr lives.
    auto at = [&](u32 rr, u32 j) -> u64 {
        if (REVERSED_OUT) return ((u64)(blockIdx.x + (rr << (G - log_r))) << k) + j;
        return base + rr + ((u64)j << log_hlo);
    };

    for (u32 i = threadIdx.x; i < E; i += blockDim.x) {
        u32 rr = i & (R - 1), j = i >> log_r;
        sh[i] = in[at(rr, j)];
    }
    // Local stage j (half-size h = h_lo·2^j) multiplies by ω_{2h}^(x mod h),
    // x mod h = r + m·h_lo for m < 2^j: stored at tws[(2^j − 1 + m)·R + rr].
    // (With REVERSED_OUT every group has r = 0: the R copies are equal.)
    for (u32 i = threadIdx.x; i < E - R; i += blockDim.x) {
        const u32 rr = REVERSED_OUT ? 0 : i & (R - 1), slot = (i >> log_r) + 1;  // 2^j + m
        const u32 j = 31 - __clz(slot), m = slot - (1u << j);
        tws[i] = twiddle<INVERSE>(tw, (r0 + rr + (m << log_hlo)) << (log_n - 1 - log_hlo - j), half_n);
    }
    __syncthreads();
    auto w = [&](u32 rr, u32 j, u32 m) -> fr_t { return tws[(((1u << j) - 1 + m) << log_r) + rr]; };

    // Two stages at a time in registers (radix-4), one when a single stage is left.
    for (u32 s = 0; s < k;) {
        if (k - s >= 2) {
            // The two stages have local half-sizes H1 = 2^l and H2 = 2^(l−1);
            // each thread takes the four elements b, b+H2, b+H1, b+H1+H2.
            const u32 l = DIT ? s + 1 : k - 1 - s;
            const u32 H2 = 1u << (l - 1), H1 = 1u << l;
            for (u32 tid = threadIdx.x; tid < (E >> 2); tid += blockDim.x) {
                const u32 rr = tid & (R - 1), t = tid >> log_r;
                const u32 b = ((t >> (l - 1)) << (l + 1)) | (t & (H2 - 1));
                fr_t* p0 = &sh[b * R + rr];
                fr_t* p1 = &sh[(b + H2) * R + rr];
                fr_t* p2 = &sh[(b + H1) * R + rr];
                fr_t* p3 = &sh[(b + H1 + H2) * R + rr];
                fr_t x0 = *p0, x1 = *p1, x2 = *p2, x3 = *p3;
                const fr_t wa = w(rr, l, b & (H1 - 1));
                const fr_t wb = w(rr, l, (b + H2) & (H1 - 1));
                const fr_t wc = w(rr, l - 1, b & (H2 - 1));
                if (DIT) {
                    fr_t t1 = x1 * wc, t3 = x3 * wc;
                    fr_t y0 = x0 + t1, y1 = x0 - t1, y2 = x2 + t3, y3 = x2 - t3;
                    fr_t u2 = y2 * wa, u3 = y3 * wb;
                    *p0 = y0 + u2;
                    *p2 = y0 - u2;
                    *p1 = y1 + u3;
                    *p3 = y1 - u3;
                } else {
                    fr_t y0 = x0 + x2, y2 = (x0 - x2) * wa;
                    fr_t y1 = x1 + x3, y3 = (x1 - x3) * wb;
                    *p0 = y0 + y1;
                    *p1 = (y0 - y1) * wc;
                    *p2 = y2 + y3;
                    *p3 = (y2 - y3) * wc;
                }
            }
            s += 2;
        } else {
            const u32 log_hj = DIT ? s : k - 1 - s;
            for (u32 tid = threadIdx.x; tid < (E >> 1); tid += blockDim.x) {
                const u32 rr = tid & (R - 1), t = tid >> log_r;
                const u32 lo = t & ((1u << log_hj) - 1);
                const u32 j0 = ((t >> log_hj) << (log_hj + 1)) + lo;
                const u32 j1 = j0 + (1u << log_hj);
                const fr_t wj = w(rr, log_hj, lo);
                fr_t x = sh[j0 * R + rr], y = sh[j1 * R + rr];
                if (DIT) {
                    y = y * wj;
                    sh[j0 * R + rr] = x + y;
                    sh[j1 * R + rr] = x - y;
                } else {
                    sh[j0 * R + rr] = x + y;
                    sh[j1 * R + rr] = (x - y) * wj;
                }
            }
            s += 1;
        }
        __syncthreads();
    }

    if (REVERSED_OUT) {
        // Index q·2^k + j reversed is rev(j)·2^G + rev(blockIdx.x)·R + rev(rr).
        const u64 mid = (u64)bitrev(blockIdx.x, G - log_r) << log_r;
        for (u32 i = threadIdx.x; i < E; i += blockDim.x) {
            const u32 rr_rev = i & (R - 1), j_rev = i >> log_r;
            out[((u64)j_rev << G) | mid | rr_rev] = sh[bitrev(j_rev, k) * R + bitrev(rr_rev, log_r)];
        }
    } else {
        for (u32 i = threadIdx.x; i < E; i += blockDim.x) {
            u32 rr = i & (R - 1), j = i >> log_r;
            out[at(rr, j)] = sh[i];
        }
    }
}

#define NTT_PASS(NAME, DIT, INVERSE)                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 3)                                              \
        NAME(fr_t* data, const fr_t* __restrict__ tw, u32 log_n, u32 log_hlo, u32 k, u32 log_r) {       \
        ntt_pass<DIT, INVERSE, false>(data, data, tw, log_n, log_hlo, k, log_r);                      \
    }
NTT_PASS(ntt_pass_dif, false, false)
NTT_PASS(ntt_pass_dif_inverse, false, true)
NTT_PASS(ntt_pass_dit, true, false)
NTT_PASS(ntt_pass_dit_inverse, true, true)

#define NTT_LAST_PASS_REVERSED(NAME, INVERSE)                                                             \
    extern "C" __global__ void __launch_bounds__(256, 3)                                                  \
        NAME(const fr_t* __restrict__ in, fr_t* __restrict__ out, const fr_t* __restrict__ tw, u32 log_n, \
             u32 k, u32 log_r) {                                                                          \
        ntt_pass<false, INVERSE, true>(in, out, tw, log_n, 0, k, log_r);                                  \
    }
NTT_LAST_PASS_REVERSED(ntt_last_pass_reversed, false)
NTT_LAST_PASS_REVERSED(ntt_last_pass_reversed_inverse, true)

extern "C" __global__ void bit_reverse(fr_t* __restrict__ data, u32 log_n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >> log_n) return;
    u32 j = bitrev(i, log_n);
    if (i < j) {
        fr_t t = data[i];
        data[i] = data[j];
        data[j] = t;
    }
}

// In-place bit reversal in tiles, for log_n ≥ 2·BR_LOG. An index is (h, m, l)
// with h its top and l its bottom BR_LOG bits; (h, m, l) moves to
// (rev l, rev m, rev h). Block m swaps the tiles of m and rev m through shared
// memory, reading rows of consecutive l and writing rows of consecutive rev h,
// so that both sides move 512-byte runs instead of scattered 32-byte elements.
#define BR_LOG 4u
#define BR_T (1u << BR_LOG)

extern "C" __global__ void __launch_bounds__(BR_T * BR_T) bit_reverse_tiled(fr_t* __restrict__ data, u32 log_n) {
    __shared__ fr_t tile[2][BR_T * BR_T];
    const u32 mid_bits = log_n - 2 * BR_LOG;
    const u32 m = blockIdx.x, rm = bitrev(m, mid_bits);
    if (rm < m) return;  // block rm does this pair
    const u32 t = threadIdx.x, h = t >> BR_LOG, l = t & (BR_T - 1);
    const u64 row = (u64)h << (log_n - BR_LOG);
    const u64 at_m = row | ((u64)m << BR_LOG) | l, at_rm = row | ((u64)rm << BR_LOG) | l;
    tile[0][t] = data[at_m];
    tile[1][t] = data[at_rm];
    __syncthreads();
    // (h, rm, l) receives (rev l, m, rev h), and (h, m, l) receives (rev l, rm, rev h).
    const u32 from = (bitrev(l, BR_LOG) << BR_LOG) | bitrev(h, BR_LOG);
    data[at_rm] = tile[0][from];
    data[at_m] = tile[1][from];
}

// data[i] *= c·x^e(i), e(i) = i or bitrev(i); the power is hi[e >> lo_bits]·lo[e & mask],
// with the constant c folded into hi.
extern "C" __global__ void scale_powers(fr_t* __restrict__ data, u32 log_n, const fr_t* __restrict__ lo,
                                        const fr_t* __restrict__ hi, u32 lo_bits, u32 bitrev_order) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >> log_n) return;
    u32 e = bitrev_order ? bitrev(i, log_n) : i;
    data[i] = data[i] * (hi[e >> lo_bits] * lo[e & ((1u << lo_bits) - 1)]);
}

// a = (a·b − c)·z_inv: the quotient's evaluations on the coset.
extern "C" __global__ void quotient_pointwise(fr_t* __restrict__ a, const fr_t* __restrict__ b,
                                              const fr_t* __restrict__ c, fr_t z_inv, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    a[i] = (a[i] * b[i] - c[i]) * z_inv;
}

// a = a·b, then a = (a − c)·k: the quotient's evaluations in two passes, so
// that b is freed before c is on the device (two vectors at a time).
extern "C" __global__ void fr_mul_assign(fr_t* __restrict__ a, const fr_t* __restrict__ b, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    a[i] = a[i] * b[i];
}

extern "C" __global__ void fr_sub_scale(fr_t* __restrict__ a, const fr_t* __restrict__ c, fr_t k, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    a[i] = (a[i] - c[i]) * k;
}

// Fills data[i] = lo[i & mask]·hi[i >> lo_bits]: twiddle tables from two small ones.
extern "C" __global__ void fill_powers(fr_t* __restrict__ data, u32 n, const fr_t* __restrict__ lo,
                                       const fr_t* __restrict__ hi, u32 lo_bits) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    data[i] = hi[i >> lo_bits] * lo[i & ((1u << lo_bits) - 1)];
}
