//! How snarkjs writes numbers and points, read into blstrs values: field
//! elements little-endian, points as affine (x, y) with coordinates in
//! Montgomery form (the limbs blst keeps in memory), the identity as zeros.

use blstrs::{Fp, Fp2, G1Affine, G2Affine, Scalar};

use crate::groth16::PointCheck;
use ff::{Field, PrimeField};

/// Curves snarkjs knows, by their base field's modulus (big-endian hex).
const CURVES: [(&str, &str); 2] = [
    (
        "bls12381",
        "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab",
    ),
    ("bn128", "30644e72e131a029b85045b68181585d97816a916871ca8d3c208c16d87cfd47"),
];
/// Scalar fields snarkjs knows (the `q` a `.wtns` names), big-endian hex.
const SCALAR_FIELDS: [(&str, &str); 2] = [
    ("bls12381", "73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001"),
    ("bn128", "30644e72e131a029b85045b68181585d2833e84879b9709143e1f593f0000001"),
];

pub const G1_BYTES: usize = 96;
pub const G2_BYTES: usize = 192;
pub const FR_BYTES: usize = 32;

fn name_of(table: &[(&'static str, &str)], le: &[u8]) -> Option<&'static str> {
    let mut be = le.to_vec();
    be.reverse();
    let hex = hex::encode(be);
    let hex = hex.trim_start_matches('0');
    table.iter().find(|(_, m)| m.trim_start_matches('0') == hex).map(|(n, _)| *n)
}

/// The curve whose base field has modulus `q` (little-endian), if snarkjs knows it.
pub fn curve_of_base_field(q: &[u8]) -> Option<&'static str> {
    name_of(&CURVES, q)
}

/// The curve whose scalar field has modulus `r` (little-endian), if snarkjs knows it.
pub fn curve_of_scalar_field(r: &[u8]) -> Option<&'static str> {
    name_of(&SCALAR_FIELDS, r)
}

/// A little-endian integer as a field element, refused at or above r.
pub fn scalar_le(bytes: &[u8]) -> Option<Scalar> {
    let repr: [u8; FR_BYTES] = bytes.try_into().ok()?;
    Option::from(Scalar::from_repr(repr))
}

/// 48 little-endian bytes of Montgomery limbs as an Fp, refused unless reduced.
fn fp_montgomery(bytes: &[u8]) -> Option<Fp> {
    let mut limbs = [0u64; 6];
    for (l, c) in limbs.iter_mut().zip(bytes.chunks_exact(8)) {
        *l = u64::from_le_bytes(c.try_into().unwrap());
    }
    let x = Fp::from_raw_unchecked(limbs);
    // A reduced value survives leaving and re-entering Montgomery form unchanged.
    let canonical = Option::<Fp>::from(Fp::from_bytes_le(&x.to_bytes_le()))?;
    (canonical == x).then_some(x)
}

/// Why a point was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointError {
    #[error("a coordinate is not reduced modulo the base field")]
    Unreduced,
    #[error("the point is not on the curve")]
    OffCurve,
    #[error("the point is not in the prime-order subgroup")]
    OutsideSubgroup,
}

/// A G1 point as snarkjs writes it (x, y in Montgomery form; zeros for the
/// identity), checked as `check` says (coordinates are always checked).
pub fn g1(bytes: &[u8], check: PointCheck) -> Result<G1Affine, PointError> {
    let x = fp_montgomery(&bytes[..48]).ok_or(PointError::Unreduced)?;
    let y = fp_montgomery(&bytes[48..96]).ok_or(PointError::Unreduced)?;
    if bool::from(x.is_zero() & y.is_zero()) {
        return Ok(G1Affine::default());
    }
    let p = G1Affine::from_raw_unchecked(x, y, false);
    checked(check, || p.is_on_curve().into(), || p.is_torsion_free().into(), p)
}

/// A G2 point as snarkjs writes it (x.c0, x.c1, y.c0, y.c1).
pub fn g2(bytes: &[u8], check: PointCheck) -> Result<G2Affine, PointError> {
    let c: Vec<Fp> =
        bytes.chunks_exact(48).map(fp_montgomery).collect::<Option<_>>().ok_or(PointError::Unreduced)?;
    let (x, y) = (Fp2::new(c[0], c[1]), Fp2::new(c[2], c[3]));
    if bool::from(x.is_zero() & y.is_zero()) {
        return Ok(G2Affine::default());
    }
    let p = G2Affine::from_raw_unchecked(x, y, false);
    checked(check, || p.is_on_curve().into(), || p.is_torsion_free().into(), p)
}

fn checked<P>(
    check: PointCheck,
    on_curve: impl Fn() -> bool,
    in_subgroup: impl Fn() -> bool,
    p: P,
) -> Result<P, PointError> {
    if check != PointCheck::Trusted && !on_curve() {
        return Err(PointError::OffCurve);
    }
    if check == PointCheck::Full && !in_subgroup() {
        return Err(PointError::OutsideSubgroup);
    }
    Ok(p)
}

/// snarkjs stores a matrix coefficient c as c·R² (R = 2²⁵⁶ mod r) so that
/// one Montgomery product with a plain witness value gives c·w in Montgomery
/// form; a stored value times this factor is c.
pub fn coefficient_unscale() -> Scalar {
    let r = Scalar::from(2u64).pow_vartime([256u64]);
    (r * r).invert().unwrap()
}

/// A G1 point as snarkjs writes it: blst's affine limbs are exactly
/// snarkjs's Montgomery coordinates, and its identity is all zeros.
pub fn g1_bytes(p: &G1Affine) -> Vec<u8> {
    let b = &provd_kernels::blst_repr::g1_affine_as_blst(std::slice::from_ref(p))[0];
    b.x.l.iter().chain(&b.y.l).flat_map(|l| l.to_le_bytes()).collect()
}

/// A G2 point as snarkjs writes it (x.c0, x.c1, y.c0, y.c1).
pub fn g2_bytes(p: &G2Affine) -> Vec<u8> {
    let b = &provd_kernels::blst_repr::g2_affine_as_blst(std::slice::from_ref(p))[0];
    let coords = [&b.x.fp[0], &b.x.fp[1], &b.y.fp[0], &b.y.fp[1]];
    coords.iter().flat_map(|c| c.l.iter()).flat_map(|l| l.to_le_bytes()).collect()
}

/// BLS12-381's base field modulus p and scalar field modulus r, little-endian.
pub fn bls12381_moduli_le() -> (Vec<u8>, Vec<u8>) {
    let le = |hex_be: &str| {
        let mut v = hex::decode(hex_be).expect("a hex constant");
        v.reverse();
        v
    };
    (le(CURVES[0].1), le(SCALAR_FIELDS[0].1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use group::prime::PrimeCurveAffine;

    /// Montgomery limbs as snarkjs writes them: the plain bytes of x·R, R = 2³⁸⁴.
    fn fp_bytes(x: &Fp) -> Vec<u8> {
        let r = Fp::from(2u64).pow_vartime([384u64]);
        (*x * r).to_bytes_le().to_vec()
    }

    #[test]
    fn points_round_trip_and_bad_ones_are_named() {
        let g = G1Affine::generator();
        let mut bytes = fp_bytes(&g.x());
        bytes.extend(fp_bytes(&g.y()));
        let full = PointCheck::Full;
        assert_eq!(g1(&bytes, full), Ok(g));
        assert_eq!(g1(&[0u8; 96], full), Ok(G1Affine::identity()));
        let mut off = bytes.clone();
        off[50] ^= 1;
        for check in [PointCheck::Full, PointCheck::OnCurve] {
            assert!(matches!(g1(&off, check), Err(PointError::OffCurve | PointError::Unreduced)));
        }
        assert_eq!(g1(&[0xff; 96], full), Err(PointError::Unreduced));

        let h = G2Affine::generator();
        let mut bytes = fp_bytes(&h.x().c0());
        for c in [h.x().c1(), h.y().c0(), h.y().c1()] {
            bytes.extend(fp_bytes(&c));
        }
        assert_eq!(g2(&bytes, full), Ok(h));
        assert_eq!(g2(&[0u8; 192], full), Ok(G2Affine::identity()));
        assert_eq!(g2_bytes(&h), bytes);
        assert_eq!(g1_bytes(&g), [fp_bytes(&g.x()), fp_bytes(&g.y())].concat());
        assert_eq!(g1_bytes(&G1Affine::identity()), vec![0u8; 96]);
    }

    #[test]
    fn curves_are_named_by_their_moduli() {
        let le = |hex_be: &str| {
            let mut v = hex::decode(hex_be).unwrap();
            v.reverse();
            v
        };
        assert_eq!(curve_of_base_field(&le(CURVES[1].1)), Some("bn128"));
        assert_eq!(curve_of_scalar_field(&le(SCALAR_FIELDS[0].1)), Some("bls12381"));
        let mut r = le(SCALAR_FIELDS[0].1);
        r.resize(48, 0); // zero padding does not matter
        assert_eq!(curve_of_scalar_field(&r), Some("bls12381"));
        assert_eq!(curve_of_base_field(&[7u8; 48]), None);
    }
}
