//! A device-memory cap that is physical: allocations that take all of a
//! device's free memory but a stated amount, so that whatever runs beside
//! them (in another process) can use only what a smaller card would have.
//! An advisory limit can be passed quietly by a buffer nobody counted; a
//! ballast cannot, so a proof that fits under it fits on such a card.

use cudarc::driver::CudaSlice;

use crate::device::Gpu;
use crate::error::{During, GpuError};

/// Largest single allocation of a ballast: smaller blocks find room where
/// the device's free memory is fragmented.
const BLOCK: usize = 1 << 30;
/// What is left unallocated is rounded down to this (the driver's page).
const GRAIN: usize = 2 << 20;

/// Device memory held until dropped.
pub struct Ballast {
    blocks: Vec<CudaSlice<u8>>,
    held: usize,
}

impl Ballast {
    /// Allocates until at most `leave` bytes of `gpu`'s memory are free (as
    /// the driver counts them: another process's context then takes its
    /// share of what is left, as it would on a card of that size).
    pub fn hold(gpu: &Gpu, leave: usize) -> Result<Self, GpuError> {
        let mut ballast = Ballast { blocks: Vec::new(), held: 0 };
        loop {
            let (free, _) = gpu.memory()?;
            let take = free.saturating_sub(leave).min(BLOCK) / GRAIN * GRAIN;
            if take == 0 {
                return Ok(ballast);
            }
            // SAFETY: never read or written; it only takes up room.
            let block = unsafe { gpu.stream().alloc::<u8>(take) }.during("allocating the ballast")?;
            ballast.blocks.push(block);
            ballast.held += take;
        }
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        self.held
    }
}
