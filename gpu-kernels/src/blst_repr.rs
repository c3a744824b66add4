//! blstrs's types seen as blst's, in one place.
//!
//! blstrs wraps blst's structs with `#[repr(transparent)]` (`Scalar` over
//! `blst_fr`, `G1Affine` over `blst_p1_affine`, …), so slices of blstrs values
//! are handed to blst's Pippenger and to the kernels without a copy. Every
//! reinterpretation between the two crates is one of the functions below, next
//! to the size assertions that make it sound; no other module transmutes.

use blst::{blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};

const _: () = assert!(std::mem::size_of::<Scalar>() == std::mem::size_of::<[u64; 4]>());
const _: () = assert!(std::mem::size_of::<G1Affine>() == std::mem::size_of::<blst_p1_affine>());
const _: () = assert!(std::mem::size_of::<G2Affine>() == std::mem::size_of::<blst_p2_affine>());
const _: () = assert!(std::mem::size_of::<G1Projective>() == std::mem::size_of::<blst_p1>());
const _: () = assert!(std::mem::size_of::<G2Projective>() == std::mem::size_of::<blst_p2>());

/// G1 affine points as blst's, for its Pippenger.
pub fn g1_affine_as_blst(points: &[G1Affine]) -> &[blst_p1_affine] {
    // SAFETY: G1Affine is repr(transparent) over blst_p1_affine (size asserted above).
    unsafe { std::slice::from_raw_parts(points.as_ptr().cast(), points.len()) }
}

/// G2 affine points as blst's, for its Pippenger.
pub fn g2_affine_as_blst(points: &[G2Affine]) -> &[blst_p2_affine] {
    // SAFETY: G2Affine is repr(transparent) over blst_p2_affine (size asserted above).
    unsafe { std::slice::from_raw_parts(points.as_ptr().cast(), points.len()) }
}

/// A blst G1 point (Jacobian) as blstrs's.
pub fn g1_from_blst(p: blst_p1) -> G1Projective {
    // SAFETY: G1Projective is repr(transparent) over blst_p1.
    unsafe { std::mem::transmute::<blst_p1, G1Projective>(p) }
}

/// A blst G2 point (Jacobian) as blstrs's.
pub fn g2_from_blst(p: blst_p2) -> G2Projective {
    // SAFETY: G2Projective is repr(transparent) over blst_p2.
    unsafe { std::mem::transmute::<blst_p2, G2Projective>(p) }
}

/// A scalar's Montgomery limbs (blst_fr's), least significant first.
pub fn scalar_limbs(x: Scalar) -> [u64; 4] {
    // SAFETY: Scalar is repr(transparent) over blst_fr { l: [u64; 4] }.
    unsafe { std::mem::transmute::<Scalar, [u64; 4]>(x) }
}

/// A scalar from Montgomery limbs. The limbs must be reduced (below the
/// modulus in Montgomery form), as the kernels produce them.
pub fn scalar_from_limbs(limbs: [u64; 4]) -> Scalar {
    // SAFETY: as in `scalar_limbs`; every kernel output is reduced.
    unsafe { std::mem::transmute::<[u64; 4], Scalar>(limbs) }
}

/// Values reinterpreted as another type of the same size and alignment.
///
/// # Safety
/// `T` and `U` must have the same size and alignment and every bit pattern of
/// a `T` must be a valid `U` (plain limbs and points of limbs).
pub unsafe fn cast_slice<T, U>(v: &[T]) -> &[U] {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<U>()) };
    const { assert!(std::mem::align_of::<T>() == std::mem::align_of::<U>()) };
    std::slice::from_raw_parts(v.as_ptr().cast(), v.len())
}

/// As [`cast_slice`], mutably.
///
/// # Safety
/// As [`cast_slice`], in both directions: whatever is written as a `U` must be
/// a valid `T`.
pub unsafe fn cast_slice_mut<T, U>(v: &mut [T]) -> &mut [U] {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<U>()) };
    const { assert!(std::mem::align_of::<T>() == std::mem::align_of::<U>()) };
    std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;
    use group::{Curve, Group};

    #[test]
    fn reinterpretations_round_trip() {
        let mut rng = rand::thread_rng();
        let x = Scalar::random(&mut rng);
        assert_eq!(scalar_from_limbs(scalar_limbs(x)), x);
        let p = G1Projective::random(&mut rng);
        let a = [p.to_affine()];
        let mut back = blst_p1::default();
        // SAFETY: blst conversion on valid values.
        unsafe { blst::blst_p1_from_affine(&mut back, &g1_affine_as_blst(&a)[0]) };
        assert_eq!(g1_from_blst(back), p);
        let q = G2Projective::random(&mut rng);
        let b = [q.to_affine()];
        let mut back = blst_p2::default();
        // SAFETY: as above.
        unsafe { blst::blst_p2_from_affine(&mut back, &g2_affine_as_blst(&b)[0]) };
        assert_eq!(g2_from_blst(back), q);
    }
}
