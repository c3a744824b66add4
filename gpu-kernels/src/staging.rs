//! Host-to-device copies through page-locked memory.
//!
//! A copy from pageable memory goes through the driver's own staging, a block
//! at a time and synchronously with the host: on the H200's host a prover's
//! 32 MiB vector took 3–6 ms that way (5–10 GB/s, about what one core
//! copies). Here all cores copy a chunk into one of two page-locked slots
//! while the device reads the other slot by DMA, at the link's rate.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, CudaViewMut, DeviceRepr, PinnedHostSlice};
use rayon::prelude::*;

use crate::error::{During, GpuError};

/// Bytes of one slot; two per device are pinned for the life of the process.
pub const SLOT_BYTES: usize = 8 << 20;
/// Bytes each core copies at a time within a slot.
const PIECE_BYTES: usize = 256 << 10;

/// Two page-locked slots, each with the event of the last copy out of it.
pub(crate) struct Staging {
    slots: Vec<Slot>,
}

struct Slot {
    mem: PinnedHostSlice<u8>,
    /// Recorded after the last DMA that reads the slot; synchronised before
    /// the host writes it again.
    read: CudaEvent,
}

impl Staging {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self, GpuError> {
        let slot = || -> Result<Slot, GpuError> {
            // SAFETY: uninitialised; the host writes every byte it copies from.
            let mem =
                unsafe { ctx.alloc_pinned::<u8>(SLOT_BYTES) }.during("allocating pinned host memory")?;
            Ok(Slot { mem, read: ctx.new_event(None).during("creating an event")? })
        };
        Ok(Self { slots: vec![slot()?, slot()?] })
    }

    /// Copies `src` into `dst` (of the same length) on `stream`, a slot at a
    /// time; returns once the last chunk is queued, so `src` may then be
    /// freed. The copy is ordered on `stream` like any other work on it.
    pub(crate) fn copy<T: DeviceRepr + Copy + Send + Sync>(
        &mut self,
        stream: &Arc<CudaStream>,
        src: &[T],
        dst: &mut CudaViewMut<T>,
    ) -> Result<(), GpuError> {
        let size = std::mem::size_of::<T>();
        if dst.len() != src.len() || size == 0 || size > SLOT_BYTES {
            return Err(GpuError::Invalid(format!("a copy of {} elements into {}", src.len(), dst.len())));
        }
        let per_slot = SLOT_BYTES / size;
        let per_piece = (PIECE_BYTES / size).max(1);
        for (k, chunk) in src.chunks(per_slot).enumerate() {
            let slot = &mut self.slots[k % 2];
            slot.read.synchronize().during("waiting for a staging slot")?;
            let base = slot.mem.as_mut_ptr().during("reading a staging slot")?;
            // SAFETY: the slot holds SLOT_BYTES ≥ chunk.len()·size bytes, is
            // page-aligned (so aligned for T), and no DMA reads it now (its
            // last reader's event was waited for above).
            let host: &mut [T] = unsafe { std::slice::from_raw_parts_mut(base.cast::<T>(), chunk.len()) };
            host.par_chunks_mut(per_piece)
                .zip(chunk.par_chunks(per_piece))
                .for_each(|(d, s)| d.copy_from_slice(s));
            let at = k * per_slot;
            // A plain slice to cudarc (it tracks no event for it); the driver
            // knows the memory is pinned and makes this an asynchronous DMA.
            stream
                .memcpy_htod(&*host, &mut dst.slice_mut(at..at + chunk.len()))
                .during("copying to the device")?;
            slot.read.record(stream).during("recording an event")?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    /// The slots are freed after this; no DMA may still read them.
    fn drop(&mut self) {
        for slot in &self.slots {
            let _ = slot.read.synchronize();
        }
    }
}
