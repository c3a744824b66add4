// Montgomery arithmetic over a prime field with N 32-bit limbs, little-endian,
// in exactly blst's representation (R = 2^(32N)), so blstrs values are copied
// to the device byte for byte.
//
// Multiplication interleaves product and Montgomery reduction word by word
// (see operator*), arranged so that every 32x32-bit product is a single
// 64-bit multiply-add of a carry chain. The chains' carry flags live between
// consecutive asm statements; every statement is volatile so that the
// compiler keeps their order.

// ---- PTX carry-chain primitives ----------------------------------------------
DEVICE u32 add_cc(u32 a, u32 b) { u32 r; asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 addc_cc(u32 a, u32 b) { u32 r; asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 addc(u32 a, u32 b) { u32 r; asm volatile("addc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 sub_cc(u32 a, u32 b) { u32 r; asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 subc_cc(u32 a, u32 b) { u32 r; asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 subc(u32 a, u32 b) { u32 r; asm volatile("subc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 mad_lo_cc(u32 a, u32 b, u32 c) { u32 r; asm volatile("mad.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
DEVICE u32 madc_lo_cc(u32 a, u32 b, u32 c) { u32 r; asm volatile("madc.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
DEVICE u32 mad_hi_cc(u32 a, u32 b, u32 c) { u32 r; asm volatile("mad.hi.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
DEVICE u32 madc_hi_cc(u32 a, u32 b, u32 c) { u32 r; asm volatile("madc.hi.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
DEVICE u32 mul_lo(u32 a, u32 b) { u32 r; asm volatile("mul.lo.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE u32 mul_hi(u32 a, u32 b) { u32 r; asm volatile("mul.hi.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }

template <class P>
struct __align__(16) Mont {
    static constexpr int N = P::N;
    u32 v[N];

    static DEVICE Mont zero() {
        Mont r;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = 0;
        return r;
    }

    /// 1 in Montgomery form (R mod p).
    static DEVICE Mont one() {
        Mont r;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = P::ONE[i];
        return r;
    }

    DEVICE bool is_zero() const {
        u32 acc = 0;
#pragma unroll
        for (int i = 0; i < N; i++) acc |= v[i];
        return acc == 0;
    }

    DEVICE bool operator==(const Mont& o) const {
        u32 acc = 0;
#pragma unroll
        for (int i = 0; i < N; i++) acc |= v[i] ^ o.v[i];
        return acc == 0;
    }

    /// r − p if r ≥ p, else r (for r < 2p).
    static DEVICE void reduce_once(u32 r[N]) {
        u32 d[N];
        d[0] = sub_cc(r[0], P::MOD[0]);
#pragma unroll
        for (int i = 1; i < N; i++) d[i] = subc_cc(r[i], P::MOD[i]);
        u32 borrow = subc(0, 0);  // all ones if r < p
#pragma unroll
        for (int i = 0; i < N; i++) r[i] = borrow ? r[i] : d[i];
    }

    friend DEVICE Mont operator+(Mont a, const Mont& b) {
        a.v[0] = add_cc(a.v[0], b.v[0]);
#pragma unroll
        for (int i = 1; i < N; i++) a.v[i] = addc_cc(a.v[i], b.v[i]);
        // p < 2^(32N−1) for both fields here, so a + b never carries out.
        reduce_once(a.v);
        return a;
    }

    friend DEVICE Mont operator-(Mont a, const Mont& b) {
        a.v[0] = sub_cc(a.v[0], b.v[0]);
#pragma unroll
        for (int i = 1; i < N; i++) a.v[i] = subc_cc(a.v[i], b.v[i]);
        u32 mask = subc(0, 0);  // all ones on borrow: add p back
        a.v[0] = add_cc(a.v[0], P::MOD[0] & mask);
#pragma unroll
        for (int i = 1; i < N; i++) a.v[i] = addc_cc(a.v[i], P::MOD[i] & mask);
        return a;
    }

    DEVICE Mont neg() const {
        return zero() - *this;
    }

    DEVICE Mont dbl() const {
        return *this + *this;
    }

    /// acc[0..N) += x[k]·y, k = first, first+2, …: each product's low and high
    /// halves land on consecutive limbs of one carry chain, which sm_70+
    /// executes as one 64-bit multiply-add (IMAD.WIDE.U32.X) per product.
    /// `carry_in` continues the chain of the instruction before.
    static DEVICE void mad_row(u32 acc[N], const u32* x, int first, u32 y, bool carry_in) {
        acc[0] = carry_in ? madc_lo_cc(x[first], y, acc[0]) : mad_lo_cc(x[first], y, acc[0]);
        acc[1] = madc_hi_cc(x[first], y, acc[1]);
#pragma unroll
        for (int t = 1; t < N / 2; t++) {
            acc[2 * t] = madc_lo_cc(x[first + 2 * t], y, acc[2 * t]);
            acc[2 * t + 1] = madc_hi_cc(x[first + 2 * t], y, acc[2 * t + 1]);
        }
    }

    /// One Montgomery step on the split accumulator: adds m·p with m chosen so
    /// that limb 0 becomes zero.
    static DEVICE void reduce_row(u32 e[N + 1], u32 o[N]) {
        const u32 m = e[0] * P::INV;
        mad_row(e, P::MOD, 0, m, false);
        e[N] = addc(e[N], 0);
        mad_row(o, P::MOD, 1, m, false);  // o < 2^(32N) by the bound below: no carry out
    }

    /// Divides the split value by 2^32 once its limb 0 is zero: O becomes the
    /// even accumulator and E, one limb down, the odd one. E's limb 1 falls
    /// between them; it is returned, to be added into the new limb 0 with its
    /// carry fed to the odd chain that starts at limb 1.
    static DEVICE u32 shift_limb(u32 e[N + 1], u32 o[N]) {
        const u32 between = e[1];
#pragma unroll
        for (int k = 0; k + 1 < N; k++) {
            const u32 next_o = e[k + 2];
            e[k] = o[k];
            o[k] = next_o;
        }
        e[N - 1] = o[N - 1];
        e[N] = 0;
        o[N - 1] = 0;
        return between;
    }

    /// O + E/2^32 (limb 0 of E zero): the split value as N limbs.
    static DEVICE void merge(u32 r[N], const u32 e[N + 1], const u32 o[N]) {
        r[0] = add_cc(o[0], e[1]);
#pragma unroll
        for (int k = 1; k < N; k++) r[k] = addc_cc(o[k], e[k + 1]);
    }

    /// a·b·R⁻¹ mod p, word-serial Montgomery (CIOS) over b's limbs. The running
    /// value V = E + O·2^32 (V < 2p after every row) is split so that E takes
    /// the products of a's even limbs and O those of its odd limbs: each array
    /// then receives whole 64-bit products on aligned limb pairs. Dividing by
    /// 2^32 swaps their roles: O becomes the even array and E, one limb down,
    /// the odd one, except E's limb 1, which is added into the new E's limb 0
    /// with its carry feeding the odd chain that starts at limb 1.
    friend DEVICE Mont operator*(const Mont& a, const Mont& b) {
        u32 e[N + 1], o[N];
#pragma unroll
        for (int t = 0; t < N / 2; t++) {
            e[2 * t] = mul_lo(a.v[2 * t], b.v[0]);
            e[2 * t + 1] = mul_hi(a.v[2 * t], b.v[0]);
            o[2 * t] = mul_lo(a.v[2 * t + 1], b.v[0]);
            o[2 * t + 1] = mul_hi(a.v[2 * t + 1], b.v[0]);
        }
        e[N] = 0;
        reduce_row(e, o);
#pragma unroll
        for (int i = 1; i < N; i++) {
            const u32 between = shift_limb(e, o);
            e[0] = add_cc(e[0], between);
            mad_row(o, a.v, 1, b.v[i], true);
            mad_row(e, a.v, 0, b.v[i], false);
            e[N] = addc(e[N], 0);
            reduce_row(e, o);
        }
        // V = O + E/2^32 < 2p < 2^(32N): an N-limb sum, then one conditional subtraction.
        Mont r;
        merge(r.v, e, o);
        reduce_once(r.v);
        return r;
    }

    /// a²·R⁻¹ mod p: each cross product a[i]·a[j] (i < j) once, split by the
    /// parity of i+j into two accumulators as in operator*, merged, doubled,
    /// plus the squares a[i]²; then the low half is reduced word by word on
    /// split accumulators and the high half added. ~100 wide multiply-adds
    /// against operator*'s 2N² = 128 (Fr).
    DEVICE Mont sqr() const {
        const u32* a = v;
        u32 ev[2 * N], od[2 * N];  // od[k] is limb k+1
#pragma unroll
        for (int k = 0; k < 2 * N; k++) ev[k] = od[k] = 0;
#pragma unroll
        for (int i = 0; i < N - 1; i++) {
            if (i + 2 < N) {
                int last = i + 2;
#pragma unroll
                for (int j = i + 2; j < N; j += 2) {
                    ev[i + j] = j == i + 2 ? mad_lo_cc(a[i], a[j], ev[i + j]) : madc_lo_cc(a[i], a[j], ev[i + j]);
                    ev[i + j + 1] = madc_hi_cc(a[i], a[j], ev[i + j + 1]);
                    last = j;
                }
                if (i + last + 2 < 2 * N) ev[i + last + 2] = addc(ev[i + last + 2], 0);
            }
            int last = i + 1;
#pragma unroll
            for (int j = i + 1; j < N; j += 2) {
                od[i + j - 1] = j == i + 1 ? mad_lo_cc(a[i], a[j], od[i + j - 1]) : madc_lo_cc(a[i], a[j], od[i + j - 1]);
                od[i + j] = madc_hi_cc(a[i], a[j], od[i + j]);
                last = j;
            }
            if (i + last + 1 < 2 * N - 1) od[i + last + 1] = addc(od[i + last + 1], 0);
        }
        u32 t[2 * N];
        t[0] = ev[0];
        t[1] = add_cc(ev[1], od[0]);
#pragma unroll
        for (int k = 2; k < 2 * N; k++) t[k] = addc_cc(ev[k], od[k - 1]);
        // a < p < 2^(32N−1): the cross sum is below 2^(64N−3), so doubling fits.
#pragma unroll
        for (int k = 2 * N - 1; k > 0; k--) t[k] = __funnelshift_l(t[k - 1], t[k], 1);
        t[0] <<= 1;
        t[0] = mad_lo_cc(a[0], a[0], t[0]);
        t[1] = madc_hi_cc(a[0], a[0], t[1]);
#pragma unroll
        for (int i = 1; i < N; i++) {
            t[2 * i] = madc_lo_cc(a[i], a[i], t[2 * i]);
            t[2 * i + 1] = madc_hi_cc(a[i], a[i], t[2 * i + 1]);
        }
        // (T_lo + M·p)/R ≤ p, as in operator* with the products a·b[i] left out.
        u32 e[N + 1], o[N];
#pragma unroll
        for (int k = 0; k < N; k++) {
            e[k] = t[k];
            o[k] = 0;
        }
        e[N] = 0;
        reduce_row(e, o);
#pragma unroll
        for (int i = 1; i < N; i++) {
            const u32 between = shift_limb(e, o);
            const u32 m = (e[0] + between) * P::INV;
            e[0] = add_cc(e[0], between);
            mad_row(o, P::MOD, 1, m, true);
            mad_row(e, P::MOD, 0, m, false);
            e[N] = addc(e[N], 0);
        }
        // + T_hi < p: below 2p, one conditional subtraction.
        Mont r;
        merge(r.v, e, o);
        r.v[0] = add_cc(r.v[0], t[N]);
#pragma unroll
        for (int k = 1; k < N; k++) r.v[k] = addc_cc(r.v[k], t[N + k]);
        reduce_once(r.v);
        return r;
    }

    /// x^(p−2) = x⁻¹ (0 for 0), by Fermat: slow (~1.5·log p multiplications);
    /// for precomputation, not hot paths.
    DEVICE Mont inv() const {
        u32 e[N];
        u32 borrow = 2;
#pragma unroll
        for (int i = 0; i < N; i++) {
            e[i] = P::MOD[i] - borrow;
            borrow = P::MOD[i] < borrow ? 1 : 0;
        }
        Mont r = one();
        for (int bit = 32 * N - 1; bit >= 0; bit--) {
            r = r.sqr();
            if ((e[bit / 32] >> (bit % 32)) & 1) r = r * *this;
        }
        return r;
    }

    DEVICE Mont& operator*=(const Mont& b) { return *this = *this * b; }
    DEVICE Mont& operator+=(const Mont& b) { return *this = *this + b; }
    DEVICE Mont& operator-=(const Mont& b) { return *this = *this - b; }
};
