// G1 of BLS12-381 (y² = x³ + 4 over Fp).
//
// Inputs are affine points in blst's layout (x, y in Montgomery form; the
// point at infinity is all zeros). Accumulators are XYZZ coordinates
// (x = X/ZZ, y = Y/ZZZ, ZZ³ = ZZZ²), whose mixed addition needs 8
// multiplications and 2 squarings and no inversion; ZZ = 0 is infinity.

struct g1_affine {
    fp_t x, y;

    DEVICE bool is_inf() const { return x.is_zero() && y.is_zero(); }
    DEVICE g1_affine neg() const {
        g1_affine r = *this;
        if (!is_inf()) r.y = y.neg();
        return r;
    }
};

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

struct g1_xyzz {
    fp_t X, Y, ZZ, ZZZ;

    static DEVICE g1_xyzz inf() {
        g1_xyzz r;
        r.X = r.Y = r.ZZ = r.ZZZ = fp_t::zero();
        return r;
    }

    DEVICE bool is_inf() const { return ZZ.is_zero(); }

    static DEVICE g1_xyzz from_affine(const g1_affine& a) {
        if (a.is_inf()) return inf();
        g1_xyzz r;
        r.X = a.x;
        r.Y = a.y;
        r.ZZ = r.ZZZ = fp_t::one();
        return r;
    }

    // dbl-2008-s-1 (a = 0). Not inlined: it is off the hot path, and inlining
    // every use multiplies NVRTC's compile time.
    __device__ __noinline__ g1_xyzz dbl() const {
        if (is_inf()) return *this;
        fp_t U = Y.dbl();
        fp_t V = U.sqr();
        fp_t W = U * V;
        fp_t S = X * V;
        fp_t XX = X.sqr();
        fp_t M = XX.dbl() + XX;
        g1_xyzz r;
        r.X = M.sqr() - S.dbl();
        r.Y = M * (S - r.X) - W * Y;
        r.ZZ = V * ZZ;
        r.ZZZ = W * ZZZ;
        return r;
    }

    // madd-2008-s: this += q (affine)
    DEVICE void add(const g1_affine& q) {
        if (q.is_inf()) return;
        if (is_inf()) {
            *this = from_affine(q);
            return;
        }
        fp_t U2 = q.x * ZZ;
        fp_t S2 = q.y * ZZZ;
        fp_t P = U2 - X;
        fp_t R = S2 - Y;
        if (P.is_zero()) {
            *this = R.is_zero() ? from_affine(q).dbl() : inf();
            return;
        }
        fp_t PP = P.sqr();
        fp_t PPP = P * PP;
        fp_t Q = X * PP;
        fp_t X3 = R.sqr() - PPP - Q.dbl();
        Y = R * (Q - X3) - Y * PPP;
        X = X3;
        ZZ = ZZ * PP;
        ZZZ = ZZZ * PPP;
    }

    // add-2008-s: this += q (bucket reduction; not inlined, as dbl)
    __device__ __noinline__ void add(const g1_xyzz& q) {
        if (q.is_inf()) return;
        if (is_inf()) {
            *this = q;
            return;
        }
        fp_t U1 = X * q.ZZ;
        fp_t U2 = q.X * ZZ;
        fp_t S1 = Y * q.ZZZ;
        fp_t S2 = q.Y * ZZZ;
        fp_t P = U2 - U1;
        fp_t R = S2 - S1;
        if (P.is_zero()) {
            *this = R.is_zero() ? dbl() : inf();
            return;
        }
        fp_t PP = P.sqr();
        fp_t PPP = P * PP;
        fp_t Q = U1 * PP;
        fp_t X3 = R.sqr() - PPP - Q.dbl();
        Y = R * (Q - X3) - S1 * PPP;
        X = X3;
        ZZ = ZZ * q.ZZ * PP;
        ZZZ = ZZZ * q.ZZZ * PPP;
    }
};
