//! Field elements as the kernels see them: blst's Montgomery limbs, unchanged.
//!
//! blstrs's `Scalar` is `#[repr(transparent)]` over blst's limb array, and Fp
//! is blst's own `blst_fp`, so slices of them are reinterpreted, not converted.

use blst::blst_fp as Fp;
use blstrs::Scalar;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

/// An Fr element on the device: 4 × u64 Montgomery limbs (= 8 × u32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct FrRaw(pub [u64; 4]);

/// An Fp element on the device: 6 × u64 Montgomery limbs (= 12 × u32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct FpRaw(pub [u64; 6]);

// SAFETY: plain integers, valid for any bit pattern, laid out as the kernels'
// `fr_t`/`fp_t` (little-endian u32 limbs; device allocations are 256-byte
// aligned and elements are 32 or 48 bytes, so the kernels' 16-byte alignment
// holds for every element).
unsafe impl DeviceRepr for FrRaw {}
unsafe impl ValidAsZeroBits for FrRaw {}
unsafe impl DeviceRepr for FpRaw {}
unsafe impl ValidAsZeroBits for FpRaw {}

const _: () = assert!(std::mem::size_of::<Scalar>() == 32 && std::mem::size_of::<FrRaw>() == 32);
const _: () = assert!(std::mem::size_of::<Fp>() == 48 && std::mem::size_of::<FpRaw>() == 48);

/// A field type whose in-memory form is its device form.
pub trait DeviceField: Copy {
    type Raw: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin + Send + Sync;
    /// All limbs all ones: above the modulus, so no kernel writes it by accident.
    /// Tests fill outputs with it to catch elements that are never written.
    const POISON: Self::Raw;
    fn to_raw(self) -> Self::Raw;
    fn from_raw(raw: Self::Raw) -> Self;
}

impl DeviceField for Scalar {
    type Raw = FrRaw;
    const POISON: FrRaw = FrRaw([u64::MAX; 4]);
    fn to_raw(self) -> FrRaw {
        FrRaw(crate::blst_repr::scalar_limbs(self))
    }
    fn from_raw(raw: FrRaw) -> Self {
        crate::blst_repr::scalar_from_limbs(raw.0)
    }
}

impl DeviceField for Fp {
    type Raw = FpRaw;
    const POISON: FpRaw = FpRaw([u64::MAX; 6]);
    fn to_raw(self) -> FpRaw {
        FpRaw(self.l)
    }
    fn from_raw(raw: FpRaw) -> Self {
        Fp { l: raw.0 }
    }
}

/// Reinterprets field elements as their device form, for a copy to the device.
pub fn as_raw<F: DeviceField>(v: &[F]) -> &[F::Raw] {
    // SAFETY: same size and alignment (asserted by cast_slice), every bit pattern valid for Raw.
    unsafe { crate::blst_repr::cast_slice(v) }
}

/// Reinterprets field elements as their device form, for a copy from the device.
/// The kernels write only reduced Montgomery values.
pub fn as_raw_mut<F: DeviceField>(v: &mut [F]) -> &mut [F::Raw] {
    // SAFETY: as above.
    unsafe { crate::blst_repr::cast_slice_mut(v) }
}
