//! The groups the MSM kernels serve: device layouts of their points (blst's,
//! byte for byte) and the conversions of the kernels' results.

use blst::{blst_fp, blst_fp2, blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use group::Group;

use crate::field::FpRaw;

/// An affine point over field F as the kernels read it (`affine_t<F>`;
/// blst's layout; infinity is zeros).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct AffineRaw<F> {
    pub x: F,
    pub y: F,
}

/// An XYZZ accumulator over field F as the kernels write it (`xyzz_t<F>`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct XyzzRaw<F> {
    pub x: F,
    pub y: F,
    pub zz: F,
    pub zzz: F,
}

/// An Fp2 element c0 + c1·u (blst's layout).
pub type Fp2Raw = [FpRaw; 2];

pub type G1AffineRaw = AffineRaw<FpRaw>;
pub type G1XyzzRaw = XyzzRaw<FpRaw>;
pub type G2AffineRaw = AffineRaw<Fp2Raw>;
pub type G2XyzzRaw = XyzzRaw<Fp2Raw>;

// SAFETY: plain integers in the kernels' layout (repr(C) over field elements
// that are themselves device-representable); any bit pattern is valid.
unsafe impl<F: DeviceRepr> DeviceRepr for AffineRaw<F> {}
unsafe impl<F: ValidAsZeroBits> ValidAsZeroBits for AffineRaw<F> {}
unsafe impl<F: DeviceRepr> DeviceRepr for XyzzRaw<F> {}
unsafe impl<F: ValidAsZeroBits> ValidAsZeroBits for XyzzRaw<F> {}

const _: () = assert!(std::mem::size_of::<G2Affine>() == std::mem::size_of::<G2AffineRaw>());
const _: () = assert!(std::mem::size_of::<G2Affine>() == std::mem::size_of::<blst_p2_affine>());
const _: () = assert!(std::mem::size_of::<G2Projective>() == std::mem::size_of::<blst_p2>());
const _: () = assert!(std::mem::size_of::<G1Affine>() == std::mem::size_of::<G1AffineRaw>());
const _: () = assert!(std::mem::size_of::<G1Affine>() == std::mem::size_of::<blst_p1_affine>());
const _: () = assert!(std::mem::size_of::<G1Projective>() == std::mem::size_of::<blst_p1>());

/// A group the MSM kernels serve: its blstrs types, its device layouts and
/// the suffix of its kernels' names.
pub trait MsmCurve {
    type Affine: Copy;
    type Projective: Group + Copy;
    type AffineRaw: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin;
    type XyzzRaw: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin;
    /// "" for G1, "_g2" for G2 (`MSM_KERNELS` in `cuda/msm.cu`).
    const KERNEL_SUFFIX: &'static str;
    /// Reinterprets blstrs affine points (repr(transparent) over blst's) in
    /// the kernels' layout, without a copy.
    fn as_raw(points: &[Self::Affine]) -> &[Self::AffineRaw];
    /// (X, Y, ZZ, ZZZ) → the point (X/ZZ, Y/ZZZ).
    fn xyzz_to_projective(p: &Self::XyzzRaw) -> Self::Projective;
    /// The name of this curve's instance of a point kernel.
    fn kernel(name: &str) -> String {
        format!("{name}{}", Self::KERNEL_SUFFIX)
    }
}

/// G1 of BLS12-381.
pub struct G1;
/// G2 of BLS12-381.
pub struct G2;

impl MsmCurve for G1 {
    type Affine = G1Affine;
    type Projective = G1Projective;
    type AffineRaw = G1AffineRaw;
    type XyzzRaw = G1XyzzRaw;
    const KERNEL_SUFFIX: &'static str = "";
    fn as_raw(points: &[G1Affine]) -> &[G1AffineRaw] {
        // SAFETY: G1Affine is repr(transparent) over blst_p1_affine {x, y: blst_fp} = 2 × [u64; 6].
        unsafe { crate::blst_repr::cast_slice(points) }
    }
    fn xyzz_to_projective(p: &G1XyzzRaw) -> G1Projective {
        if p.zz.0.iter().all(|l| *l == 0) {
            return G1Projective::identity();
        }
        let fp = |r: &FpRaw| blst_fp { l: r.0 };
        let (mut zz_inv, mut zzz_inv) = (blst_fp::default(), blst_fp::default());
        let mut aff = blst_p1_affine::default();
        let mut out = blst_p1::default();
        // SAFETY: blst field and point functions on valid, owned values.
        unsafe {
            blst::blst_fp_inverse(&mut zz_inv, &fp(&p.zz));
            blst::blst_fp_inverse(&mut zzz_inv, &fp(&p.zzz));
            blst::blst_fp_mul(&mut aff.x, &fp(&p.x), &zz_inv);
            blst::blst_fp_mul(&mut aff.y, &fp(&p.y), &zzz_inv);
            blst::blst_p1_from_affine(&mut out, &aff);
        }
        crate::blst_repr::g1_from_blst(out)
    }
}

impl MsmCurve for G2 {
    type Affine = G2Affine;
    type Projective = G2Projective;
    type AffineRaw = G2AffineRaw;
    type XyzzRaw = G2XyzzRaw;
    const KERNEL_SUFFIX: &'static str = "_g2";
    fn as_raw(points: &[G2Affine]) -> &[G2AffineRaw] {
        // SAFETY: G2Affine is blst_p2_affine {x, y: blst_fp2} = 2 × 2 × [u64; 6].
        unsafe { crate::blst_repr::cast_slice(points) }
    }
    fn xyzz_to_projective(p: &G2XyzzRaw) -> G2Projective {
        if p.zz.iter().all(|c| c.0.iter().all(|l| *l == 0)) {
            return G2Projective::identity();
        }
        let fp2 = |r: &Fp2Raw| blst_fp2 { fp: [blst_fp { l: r[0].0 }, blst_fp { l: r[1].0 }] };
        let (mut zz_inv, mut zzz_inv) = (blst_fp2::default(), blst_fp2::default());
        let mut aff = blst_p2_affine::default();
        let mut out = blst_p2::default();
        // SAFETY: blst field and point functions on valid, owned values.
        unsafe {
            blst::blst_fp2_inverse(&mut zz_inv, &fp2(&p.zz));
            blst::blst_fp2_inverse(&mut zzz_inv, &fp2(&p.zzz));
            blst::blst_fp2_mul(&mut aff.x, &fp2(&p.x), &zz_inv);
            blst::blst_fp2_mul(&mut aff.y, &fp2(&p.y), &zzz_inv);
            blst::blst_p2_from_affine(&mut out, &aff);
        }
        crate::blst_repr::g2_from_blst(out)
    }
}
