// G1 (y² = x³ + 4 over Fp) and G2 (y² = x³ + 4(u + 1) over Fp2) of
// BLS12-381: both have a = 0, so one set of formulas, generic over the field,
// serves both.
//
// Inputs are affine points in blst's layout (x, y in Montgomery form; the
// point at infinity is all zeros). Accumulators are XYZZ coordinates
// (x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ²), whose mixed addition needs 8
// multiplications and 2 squarings and no inversion; ZZ = 0 is infinity.

// Fp2 = Fp[u]/(u² + 1), as blst lays it out: c0 + c1·u.
struct __align__(16) fp2_t {
    fp_t c0, c1;

    static DEVICE fp2_t zero() { return {fp_t::zero(), fp_t::zero()}; }
    static DEVICE fp2_t one() { return {fp_t::one(), fp_t::zero()}; }
    DEVICE bool is_zero() const { return c0.is_zero() && c1.is_zero(); }
    friend DEVICE fp2_t operator+(const fp2_t& a, const fp2_t& b) { return {a.c0 + b.c0, a.c1 + b.c1}; }
    friend DEVICE fp2_t operator-(const fp2_t& a, const fp2_t& b) { return {a.c0 - b.c0, a.c1 - b.c1}; }
    DEVICE fp2_t neg() const { return {c0.neg(), c1.neg()}; }
    DEVICE fp2_t dbl() const { return {c0.dbl(), c1.dbl()}; }
    // Karatsuba: 3 multiplications. Not inlined: G2 is off the hot path, and
    // inlining Fp2 into every point formula multiplies NVRTC's compile time.
    friend __device__ __noinline__ fp2_t operator*(const fp2_t& a, const fp2_t& b) {
        const fp_t t0 = a.c0 * b.c0, t1 = a.c1 * b.c1;
        return {t0 - t1, (a.c0 + a.c1) * (b.c0 + b.c1) - t0 - t1};
    }
    // (c0 + c1)(c0 − c1) + 2·c0·c1·u: 2 multiplications.
    __device__ __noinline__ fp2_t sqr() const {
        const fp_t t = c0 * c1;
        return {(c0 + c1) * (c0 - c1), t.dbl()};
    }
};

template <class F>
struct affine_t {
    F x, y;

    DEVICE bool is_inf() const { return x.is_zero() && y.is_zero(); }
    DEVICE affine_t neg() const {
        affine_t r = *this;
        if (!is_inf()) r.y = y.neg();
        return r;
    }
};
typedef affine_t<fp_t> g1_affine;
typedef affine_t<fp2_t> g2_affine;

// Jacobian coordinates (x = X/Z², y = Y/Z³), for chains of doublings whose
// result is normalised once: one inversion of Z gives both denominators.
struct g1_jacobian {
    fp_t X, Y, Z;

    // dbl-2009-l (a = 0): 2M + 5S.
    DEVICE g1_jacobian dbl() const {
        fp_t A = X.sqr(), B = Y.sqr(), C = B.sqr();
        fp_t D = ((X + B).sqr() - A - C).dbl();
        fp_t E = A.dbl() + A;
        fp_t F = E.sqr();
        g1_jacobian r;
        r.X = F - D.dbl();
        r.Y = E * (D - r.X) - C.dbl().dbl().dbl();
        r.Z = (Y * Z).dbl();
        return r;
    }
};

template <class F>
struct xyzz_t {
    F X, Y, ZZ, ZZZ;

    static DEVICE xyzz_t inf() {
        xyzz_t r;
        r.X = r.Y = r.ZZ = r.ZZZ = F::zero();
        return r;
    }

    DEVICE bool is_inf() const { return ZZ.is_zero(); }

    static DEVICE xyzz_t from_affine(const affine_t<F>& a) {
        if (a.is_inf()) return inf();
        xyzz_t r;
        r.X = a.x;
        r.Y = a.y;
        r.ZZ = r.ZZZ = F::one();
        return r;
    }

    // dbl-2008-s-1 (a = 0). Not inlined: it is off the hot path, and inlining
    // every use multiplies NVRTC's compile time.
    __device__ __noinline__ xyzz_t dbl() const {
        if (is_inf()) return *this;
        F U = Y.dbl();
        F V = U.sqr();
        F W = U * V;
        F S = X * V;
        F XX = X.sqr();
        F M = XX.dbl() + XX;
        xyzz_t r;
        r.X = M.sqr() - S.dbl();
        r.Y = M * (S - r.X) - W * Y;
        r.ZZ = V * ZZ;
        r.ZZZ = W * ZZZ;
        return r;
    }

    // madd-2008-s: this += q (affine)
    DEVICE void add(const affine_t<F>& q) {
        if (q.is_inf()) return;
        if (is_inf()) {
            *this = from_affine(q);
            return;
        }
        F U2 = q.x * ZZ;
        F S2 = q.y * ZZZ;
        F P = U2 - X;
        F R = S2 - Y;
        if (P.is_zero()) {
            *this = R.is_zero() ? from_affine(q).dbl() : inf();
            return;
        }
        F PP = P.sqr();
        F PPP = P * PP;
        F Q = X * PP;
        F X3 = R.sqr() - PPP - Q.dbl();
        Y = R * (Q - X3) - Y * PPP;
        X = X3;
        ZZ = ZZ * PP;
        ZZZ = ZZZ * PPP;
    }

    // add-2008-s: this += q (bucket reduction; not inlined, as dbl)
    __device__ __noinline__ void add(const xyzz_t& q) {
        if (q.is_inf()) return;
        if (is_inf()) {
            *this = q;
            return;
        }
        F U1 = X * q.ZZ;
        F U2 = q.X * ZZ;
        F S1 = Y * q.ZZZ;
        F S2 = q.Y * ZZZ;
        F P = U2 - U1;
        F R = S2 - S1;
        if (P.is_zero()) {
            *this = R.is_zero() ? dbl() : inf();
            return;
        }
        F PP = P.sqr();
        F PPP = P * PP;
        F Q = U1 * PP;
        F X3 = R.sqr() - PPP - Q.dbl();
        Y = R * (Q - X3) - S1 * PPP;
        X = X3;
        ZZ = ZZ * q.ZZ * PP;
        ZZZ = ZZZ * q.ZZZ * PPP;
    }
};

typedef xyzz_t<fp_t> g1_xyzz;
typedef xyzz_t<fp2_t> g2_xyzz;
