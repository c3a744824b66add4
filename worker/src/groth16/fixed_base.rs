//! Fixed-base scalar multiplication for TEST-ONLY key generation: k·G for
//! millions of scalars k and one base G.
//!
//! A table holds, in row w, d·2^(W·w)·G for every W-bit digit d, so k·G is
//! one addition per nonzero digit of k and no doublings. The points of a
//! batch are summed window by window in affine coordinates, the additions of
//! a window sharing one field inversion (Montgomery's trick): about six
//! multiplications an addition where a mixed projective one takes eleven,
//! and the sums come out affine, with no normalisation at the end. TEST-ONLY
//! SnapDeals 2 KiB parameters took 36 s this way against 73 s with projective
//! sums (2 cores, the two binaries alternated in one run: BENCHMARKS.md).

use blstrs::{Fp, Fp2, G1Affine, G2Affine, Scalar};
use ff::{BatchInverter, Field, PrimeField};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rayon::prelude::*;

/// Bits of a scalar per table row, at most: 19 rows of 16384 points (1.5 MB
/// a row in G1). TEST-ONLY SnapDeals 2 KiB parameters (2^21 scalars) on 2
/// cores, in consecutive runs: 12 bits 43.1 s, 14 bits 35.0 s, 16 bits 35.5 s.
const MAX_WINDOW: usize = 14;

/// Points summed together, one inversion per window: large enough that the
/// inversion's cost vanishes, small enough for a core's cache.
const BATCH: usize = 1 << 12;

/// An affine point's coordinates, for the additions done here by hand.
pub(crate) trait AffineXy: PrimeCurveAffine + Send + Sync {
    type Base: Field;
    fn xy(&self) -> (Self::Base, Self::Base);
    /// The point (x, y), known to be on the curve.
    fn from_xy(x: Self::Base, y: Self::Base) -> Self;
}

/// `AffineXy` for blstrs' affine points of one group, over its base field.
macro_rules! affine_xy {
    ($affine:ty, $base:ty) => {
        impl AffineXy for $affine {
            type Base = $base;
            fn xy(&self) -> ($base, $base) {
                (self.x(), self.y())
            }
            fn from_xy(x: $base, y: $base) -> Self {
                <$affine>::from_raw_unchecked(x, y, false)
            }
        }
    };
}
affine_xy!(G1Affine, Fp);
affine_xy!(G2Affine, Fp2);

/// The table of a base's multiples.
pub(crate) struct FixedBase<G: Curve> {
    window: usize,
    table: Vec<Vec<G::AffineRepr>>,
}

impl<G> FixedBase<G>
where
    G: Curve + Group<Scalar = Scalar> + Send + Sync,
    G::AffineRepr: AffineXy<Curve = G>,
{
    /// The table for `base`, sized for about `scalars` multiplications: rows
    /// of 2^(log2 scalars − 4) points, so that building the table costs
    /// about a sixteenth of using it once.
    pub(crate) fn new(base: G, scalars: usize) -> Self {
        let window = (scalars.max(1).ilog2() as usize).saturating_sub(4).clamp(4, MAX_WINDOW);
        let windows = (Scalar::NUM_BITS as usize).div_ceil(window);
        let mut row_bases = Vec::with_capacity(windows);
        let mut b = base;
        for _ in 0..windows {
            row_bases.push(b);
            for _ in 0..window {
                b = b.double();
            }
        }
        let table = row_bases
            .into_par_iter()
            .map(|b| {
                let mut row = Vec::with_capacity(1 << window);
                let mut acc = G::identity();
                for _ in 0..1 << window {
                    row.push(acc);
                    acc += b;
                }
                let mut affine = vec![G::AffineRepr::identity(); row.len()];
                G::batch_normalize(&row, &mut affine);
                affine
            })
            .collect();
        Self { window, table }
    }

    /// k·G for every k, in parallel, as affine points.
    pub(crate) fn mul_all(&self, scalars: &[Scalar]) -> Vec<G::AffineRepr> {
        let mut out = vec![G::AffineRepr::identity(); scalars.len()];
        out.par_chunks_mut(BATCH).zip(scalars.par_chunks(BATCH)).for_each(|(out, s)| self.mul_batch(s, out));
        out
    }

    /// Adds `scalars[i]`·G to each `out[i]` (the identity, from `mul_all`).
    fn mul_batch(&self, scalars: &[Scalar], out: &mut [G::AffineRepr]) {
        let reprs: Vec<_> = scalars.iter().map(|s| s.to_repr()).collect();
        // Per window: the sums that take a table point (index, point), and
        // the differences of x to invert together.
        let mut adds: Vec<(usize, G::AffineRepr)> = Vec::with_capacity(out.len());
        let mut dx: Vec<<G::AffineRepr as AffineXy>::Base> = Vec::with_capacity(out.len());
        let mut scratch = Vec::with_capacity(out.len());
        for (w, row) in self.table.iter().enumerate() {
            adds.clear();
            dx.clear();
            for (i, repr) in reprs.iter().enumerate() {
                let d = digit(repr.as_ref(), w * self.window, self.window);
                if d == 0 {
                    continue;
                }
                let (p, q) = (out[i], row[d]);
                if bool::from(p.is_identity()) {
                    out[i] = q;
                    continue;
                }
                let ((px, _), (qx, _)) = (p.xy(), q.xy());
                if px == qx {
                    // Q = ±P: a doubling or the identity, as rare as a
                    // collision of random points; the general formula handles it.
                    out[i] = (p.to_curve() + q.to_curve()).to_affine();
                    continue;
                }
                adds.push((i, q));
                dx.push(qx - px);
            }
            scratch.resize(dx.len(), Field::ZERO);
            BatchInverter::invert_with_external_scratch(&mut dx, &mut scratch);
            for (&(i, q), inv) in adds.iter().zip(&dx) {
                let ((px, py), (qx, qy)) = (out[i].xy(), q.xy());
                let slope = (qy - py) * inv;
                let x = slope.square() - px - qx;
                let y = slope * (px - x) - py;
                out[i] = G::AffineRepr::from_xy(x, y);
            }
        }
    }
}

/// Bits [bit, bit + width) of a little-endian 32-byte scalar.
fn digit(le: &[u8], bit: usize, width: usize) -> usize {
    let mut bytes = [0u8; 8];
    let from = bit / 8;
    let to = (from + 8).min(le.len());
    bytes[..to - from].copy_from_slice(&le[from..to]);
    (u64::from_le_bytes(bytes) >> (bit % 8)) as usize & ((1 << width) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::{G1Projective, G2Projective};
    use rand::SeedableRng;

    fn check<G>(g: G, scalars: &[Scalar])
    where
        G: Curve + Group<Scalar = Scalar> + Send + Sync,
        G::AffineRepr: AffineXy<Curve = G> + std::fmt::Debug,
    {
        let got = FixedBase::new(g, scalars.len()).mul_all(scalars);
        for (i, (s, p)) in scalars.iter().zip(got).enumerate() {
            assert_eq!(p, (g * s).to_affine(), "scalar {i}");
        }
    }

    /// Zero, one, −1 (every digit nonzero), a digit in the top window
    /// alone, and random scalars over more than one batch, in G1 and G2.
    #[test]
    fn fixed_base_matches_scalar_multiplication() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut scalars =
            vec![Scalar::ZERO, Scalar::ONE, -Scalar::ONE, Scalar::from(2u64).pow_vartime([254])];
        scalars.extend((0..BATCH + 17).map(|_| Scalar::random(&mut rng)));
        check(G1Projective::random(&mut rng), &scalars);
        check(G2Projective::random(&mut rng), &scalars[..64]);
        // The widest table (digits that span three bytes), on fewer scalars than it was built for.
        let t = FixedBase::new(G1Projective::generator(), 1 << 18);
        assert_eq!(t.window, MAX_WINDOW);
        for (s, p) in scalars[..64].iter().zip(t.mul_all(&scalars[..64])) {
            assert_eq!(p, (G1Projective::generator() * s).to_affine());
        }
    }

    /// The affine formula cannot add points of one x: a sum that meets its
    /// own table point is doubled, and one that meets its negation vanishes.
    #[test]
    fn a_sum_meeting_a_table_point_of_its_own_x_doubles_or_vanishes() {
        let g = G1Projective::generator();
        let t = FixedBase::new(g, 2);
        let w = Scalar::from(1u64 << t.window);
        let p = (g * w).to_affine();
        // Sums at P and −P, then P added: w's one nonzero digit is row 1's 1·2^W·G = P.
        let mut out = vec![p, -p];
        t.mul_batch(&[w, w], &mut out);
        assert_eq!(out[0], (g * (w + w)).to_affine(), "P + P");
        assert!(bool::from(out[1].is_identity()), "−P + P");
    }
}
