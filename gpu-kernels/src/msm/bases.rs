//! Bases of an MSM on the device (plain, or with precomputed shifted copies)
//! or in the host's memory, page-locked in place.

use std::marker::PhantomData;

use blstrs::G1Affine;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, PushKernelArg};

use super::curve::{G1AffineRaw, MsmCurve, G1, G2};
use super::heavy;
use crate::device::{Gpu, Registration};
use crate::error::{During, GpuError};

/// Bases resident on the device, reusable across MSMs (a proving key's
/// queries are fixed, so they are uploaded once).
///
/// Optionally with shifted copies (see [`G1Bases::upload_shifted`]): copy k
/// holds 2^(c·k)·P for every base P, so that an MSM puts the digits of every
/// window into one set of buckets. That trades `copies`× the device memory for
/// fewer point additions: a wider window costs one bucket reduction instead of
/// one per window.
pub struct Bases<C: MsmCurve> {
    /// `copies` runs of `len` points; copy 0 is the bases themselves.
    pub(super) points: CudaSlice<C::AffineRaw>,
    pub(super) len: usize,
    /// Window width of the shifted copies, if any.
    pub(super) shift_bits: Option<u32>,
    curve: PhantomData<C>,
}

pub type G1Bases = Bases<G1>;
pub type G2Bases = Bases<G2>;

impl<C: MsmCurve> Bases<C> {
    pub fn upload(gpu: &Gpu, points: &[C::Affine]) -> Result<Self, GpuError> {
        let points = gpu.stream().clone_htod(C::as_raw(points)).during("copying bases to the device")?;
        Ok(Self { len: points.len(), points, shift_bits: None, curve: PhantomData })
    }

    /// Number of bases (not counting shifted copies).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device bytes held, shifted copies included.
    pub fn bytes(&self) -> usize {
        self.points.len() * std::mem::size_of::<C::AffineRaw>()
    }

    /// The window width of the shifted copies, if there are any.
    pub fn shift_bits(&self) -> Option<u32> {
        self.shift_bits
    }
}

impl Bases<G1> {
    /// Uploads the bases and computes, on the device, their shifted copies
    /// for windows of [`shifted_window_bits`]`(len)` bits: ⌈256 / c⌉ copies in
    /// all (12 at 2^24 points, 11 at 2^26), each as large as the bases.
    pub fn upload_shifted(gpu: &Gpu, points: &[G1Affine]) -> Result<Self, GpuError> {
        if points.is_empty() {
            return Self::upload(gpu, points);
        }
        Self::shifted_with(gpu, points.len(), |stream, copy0| {
            stream.memcpy_htod(G1::as_raw(points), copy0).during("copying bases to the device")
        })
    }

    /// [`Bases::upload`] of `len` bases that `fill(start, chunk)` writes a
    /// chunk at a time, in order: for bases kept on the device in another
    /// order than the host's, so that no reordered copy of them all is made
    /// on the host (2^27 of H's bases are 12 GiB).
    pub fn upload_from(
        gpu: &Gpu,
        len: usize,
        fill: impl FnMut(usize, &mut [G1Affine]),
    ) -> Result<Self, GpuError> {
        let stream = gpu.stream();
        let mut points = unsafe { stream.alloc::<G1AffineRaw>(len) }.during("allocating the bases")?;
        copy_by_chunks(gpu, &mut points.slice_mut(..), fill)?;
        Ok(Self { len, points, shift_bits: None, curve: PhantomData })
    }

    /// [`G1Bases::upload_shifted`] of `len` bases that `fill` writes a chunk
    /// at a time, as [`Bases::upload_from`].
    pub fn upload_shifted_from(
        gpu: &Gpu,
        len: usize,
        fill: impl FnMut(usize, &mut [G1Affine]),
    ) -> Result<Self, GpuError> {
        if len == 0 {
            return Self::upload(gpu, &[]);
        }
        Self::shifted_with(gpu, len, |_, copy0| copy_by_chunks(gpu, copy0, fill))
    }

    /// Allocates the table of shifted copies of `len` bases, has `copy0`
    /// write the bases into its first run, and computes the others.
    fn shifted_with(
        gpu: &Gpu,
        len: usize,
        copy0: impl FnOnce(&Arc<CudaStream>, &mut CudaViewMut<'_, G1AffineRaw>) -> Result<(), GpuError>,
    ) -> Result<Self, GpuError> {
        let c = shifted_window_bits(len);
        let Some(copies) = shifted_copies(len) else {
            return Err(GpuError::Invalid(format!(
                "{len} bases with {} shifted copies exceed 2^31 points",
                256u32.div_ceil(c)
            )));
        };
        let stream = gpu.stream();
        // The bases go straight into copy 0, from which the kernel computes the others.
        let mut table = unsafe { stream.alloc::<G1AffineRaw>(len * copies as usize) }
            .during("allocating the shifted bases")?;
        copy0(stream, &mut table.slice_mut(..len))?;
        let f = gpu.function("msm_shift_bases")?;
        let mut b = stream.launch_builder(&f);
        let n32 = len as u32;
        b.arg(&n32).arg(&c).arg(&copies).arg(&mut table);
        // SAFETY: argument types and order match the kernel's signature.
        unsafe { b.launch(heavy(n32)) }.during("launching msm_shift_bases")?;
        gpu.synchronize()?;
        Ok(Self { points: table, len, shift_bits: Some(c), curve: PhantomData })
    }
}

/// Bases [`Bases::upload_from`] writes on the host at a time (6 MiB).
const FILL_CHUNK: usize = 1 << 16;

/// Copies into `dst` the bases `fill` writes, [`FILL_CHUNK`] at a time
/// through one host buffer.
fn copy_by_chunks(
    gpu: &Gpu,
    dst: &mut CudaViewMut<'_, G1AffineRaw>,
    mut fill: impl FnMut(usize, &mut [G1Affine]),
) -> Result<(), GpuError> {
    let len = dst.len();
    let mut chunk = vec![G1Affine::default(); FILL_CHUNK.min(len)];
    let stream = gpu.stream();
    for start in (0..len).step_by(FILL_CHUNK) {
        let part = &mut chunk[..FILL_CHUNK.min(len - start)];
        fill(start, part);
        stream
            .memcpy_htod(G1::as_raw(part), &mut dst.slice_mut(start..start + part.len()))
            .during("copying bases to the device")?;
        // the buffer is written again next round
        gpu.synchronize()?;
    }
    Ok(())
}

/// How many copies (the bases included) [`G1Bases::upload_shifted`] makes
/// of `len` bases; `None` where they would exceed the 2^31 points the MSM
/// kernels index.
pub fn shifted_copies(len: usize) -> Option<u32> {
    let copies = 256u32.div_ceil(shifted_window_bits(len));
    ((len as u64) * (copies as u64) < 1 << 31).then_some(copies)
}

/// Window width for shifted bases of `len` points: one set of 2^(c−1)
/// buckets serves every window, so c can be wider than without shifts.
pub fn shifted_window_bits(len: usize) -> u32 {
    let log = usize::BITS - len.max(1).leading_zeros();
    log.saturating_sub(3).clamp(8, 24)
}

/// Bases the device reads from the host's memory, for keys too large to
/// stay on the device: the caller's own points, page-locked in place
/// (registered with the driver for every device of the process) so that
/// copies of them are DMA that overlaps the kernels, with no second copy
/// of them on the host. [`super::Msm::run_streamed`] sums them chunk by
/// chunk. Unregistered when dropped.
pub struct HostBases<C: MsmCurve = G1> {
    ptr: *const C::AffineRaw,
    len: usize,
    /// `None` for no points.
    _registration: Option<Registration>,
}

// SAFETY: a read-only view of memory the creator keeps alive and unwritten
// (see `HostBases::register`); the driver's registration is process-wide.
unsafe impl<C: MsmCurve> Send for HostBases<C> {}
unsafe impl<C: MsmCurve> Sync for HostBases<C> {}

impl<C: MsmCurve> HostBases<C> {
    /// Page-locks `points` in place for `gpu` and every other device.
    ///
    /// # Safety
    /// `points` must stay allocated, in place and unwritten for as long as
    /// the result lives: the device reads them by DMA, outside Rust's view.
    pub unsafe fn register(gpu: &Gpu, points: &[C::Affine]) -> Result<Self, GpuError> {
        let raw = C::as_raw(points);
        let registration = match raw.is_empty() {
            true => None,
            false => Some(gpu.register_host(raw.as_ptr().cast(), std::mem::size_of_val(raw))?),
        };
        Ok(Self { ptr: raw.as_ptr(), len: raw.len(), _registration: registration })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Host bytes page-locked.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<C::AffineRaw>()
    }

    /// Bases `range` of them, as an MSM reads them.
    pub fn view(&self, range: impl std::ops::RangeBounds<usize>) -> HostView<'_, C> {
        // SAFETY: `register`'s contract keeps them alive and unwritten.
        let all = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        HostView { points: &all[(range.start_bound().cloned(), range.end_bound().cloned())] }
    }

    /// Whether these are `points` page-locked (the same memory, not moved since).
    pub fn registers(&self, points: &[C::Affine]) -> bool {
        std::ptr::eq(self.ptr, C::as_raw(points).as_ptr()) && self.len == points.len()
    }
}

/// A range of [`HostBases`], as [`super::Msm::run_streamed`] reads it.
pub struct HostView<'a, C: MsmCurve = G1> {
    pub(super) points: &'a [C::AffineRaw],
}

impl<C: MsmCurve> Clone for HostView<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: MsmCurve> Copy for HostView<'_, C> {}

impl<C: MsmCurve> HostView<'_, C> {
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}
