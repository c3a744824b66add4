// Montgomery arithmetic over a prime field with N 32-bit limbs, little-endian,
// in exactly blst's representation (R = 2^(32N)), so blstrs values are copied
// to the device byte for byte.
//
// Multiplication computes the full 2N-limb product (or square) and then
// reduces it. Each row of the product is two PTX carry chains: one adding the
// low halves of a[j]*b[i] at position i+j, one adding the high halves at
// i+j+1. The chains' carry flags live between consecutive asm statements;
// every statement is volatile so that the compiler keeps their order.

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

    /// Full product a·b into t[2N].
    static DEVICE void mul_wide(u32 t[2 * N], const u32 a[N], const u32 b[N]) {
#pragma unroll
        for (int i = 0; i < 2 * N; i++) t[i] = 0;
#pragma unroll
        for (int i = 0; i < N; i++) {
            // low halves at i+j; the carry lands on t[i+N] (which holds ≤ 1)
            t[i] = mad_lo_cc(a[0], b[i], t[i]);
#pragma unroll
            for (int j = 1; j < N; j++) t[i + j] = madc_lo_cc(a[j], b[i], t[i + j]);
            t[i + N] = addc(t[i + N], 0);
            // high halves at i+j+1; the carry lands on the fresh t[i+N+1]
            t[i + 1] = mad_hi_cc(a[0], b[i], t[i + 1]);
#pragma unroll
            for (int j = 1; j < N; j++) t[i + j + 1] = madc_hi_cc(a[j], b[i], t[i + j + 1]);
            if (i + N + 1 < 2 * N) t[i + N + 1] = addc(0, 0);
        }
    }

    /// Full square a² into t[2N]: cross products once, doubled, plus the diagonal.
    static DEVICE void sqr_wide(u32 t[2 * N], const u32 a[N]) {
#pragma unroll
        for (int i = 0; i < 2 * N; i++) t[i] = 0;
#pragma unroll
        for (int i = 0; i < N - 1; i++) {
            t[2 * i + 1] = mad_lo_cc(a[i], a[i + 1], t[2 * i + 1]);
#pragma unroll
            for (int j = i + 2; j < N; j++) t[i + j] = madc_lo_cc(a[i], a[j], t[i + j]);
            t[i + N] = addc(t[i + N], 0);
            t[2 * i + 2] = mad_hi_cc(a[i], a[i + 1], t[2 * i + 2]);
#pragma unroll
            for (int j = i + 2; j < N; j++) t[i + j + 1] = madc_hi_cc(a[i], a[j], t[i + j + 1]);
            if (i + N + 1 < 2 * N) t[i + N + 1] = addc(0, 0);
        }
        t[1] = add_cc(t[1], t[1]);
#pragma unroll
        for (int i = 2; i < 2 * N; i++) t[i] = addc_cc(t[i], t[i]);
        t[0] = mad_lo_cc(a[0], a[0], t[0]);
        t[1] = madc_hi_cc(a[0], a[0], t[1]);
#pragma unroll
        for (int i = 1; i < N; i++) {
            t[2 * i] = madc_lo_cc(a[i], a[i], t[2 * i]);
            t[2 * i + 1] = madc_hi_cc(a[i], a[i], t[2 * i + 1]);
        }
    }

    /// Montgomery reduction t·R⁻¹ mod p of t < p·R: reduce the low half
    /// word by word, (T_lo + M·p)/R ≤ p, then add the high half and subtract p
    /// at most once.
    static DEVICE Mont redc(const u32 t[2 * N]) {
        u32 w[N + 2];
#pragma unroll
        for (int i = 0; i < N; i++) w[i] = t[i];
        w[N] = 0;
        w[N + 1] = 0;
#pragma unroll
        for (int i = 0; i < N; i++) {
            u32 m = w[0] * P::INV;
            w[0] = mad_lo_cc(m, P::MOD[0], w[0]);
#pragma unroll
            for (int j = 1; j < N; j++) w[j] = madc_lo_cc(m, P::MOD[j], w[j]);
            w[N] = addc_cc(w[N], 0);
            w[N + 1] = addc(w[N + 1], 0);
            w[1] = mad_hi_cc(m, P::MOD[0], w[1]);
#pragma unroll
            for (int j = 1; j < N; j++) w[j + 1] = madc_hi_cc(m, P::MOD[j], w[j + 1]);
            w[N + 1] = addc(w[N + 1], 0);
#pragma unroll
            for (int j = 0; j <= N; j++) w[j] = w[j + 1];
            w[N + 1] = 0;
        }
        Mont r;
        r.v[0] = add_cc(w[0], t[N]);
#pragma unroll
        for (int i = 1; i < N; i++) r.v[i] = addc_cc(w[i], t[N + i]);
        reduce_once(r.v);
        return r;
    }

    friend DEVICE Mont operator*(const Mont& a, const Mont& b) {
        u32 t[2 * N];
        mul_wide(t, a.v, b.v);
        return redc(t);
    }

    DEVICE Mont sqr() const {
        u32 t[2 * N];
        sqr_wide(t, v);
        return redc(t);
    }

    DEVICE Mont& operator*=(const Mont& b) { return *this = *this * b; }
    DEVICE Mont& operator+=(const Mont& b) { return *this = *this + b; }
    DEVICE Mont& operator-=(const Mont& b) { return *this = *this - b; }
};
