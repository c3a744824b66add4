//! The host-to-device link's rate, from the two kinds of page-locked
//! memory provd copies out of: memory the driver allocated page-locked
//! (`cuMemHostAlloc`, as the staging slots are) and memory allocated by the
//! host's allocator and page-locked in place (`cuMemHostRegister`, as a
//! streamed key's bases are). A streamed MSM reads its bases at ~16 GB/s on
//! the H200 machine while PyTorch's pinned copies ran at 55.5 GB/s there:
//! this tells whether the registered memory, or the MSM around the copy,
//! sets the pace.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::device::Gpu;
use crate::error::{During, GpuError};

/// Gigabytes (10^9 bytes) a second, each the median of the timed copies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkRates {
    /// Bytes of each copy.
    pub bytes: usize,
    /// Out of memory the driver allocated page-locked.
    pub allocated_gbps: f64,
    /// Out of ordinary host memory page-locked in place, copied whole.
    pub registered_gbps: f64,
    /// The same registered memory, copied `chunk_bytes` at a time back to
    /// back, as a streamed MSM copies its bases.
    pub registered_chunked_gbps: f64,
    pub chunk_bytes: usize,
}

/// Times `runs` copies of `bytes` (after one untimed) from each kind of
/// page-locked memory to one device buffer, on a stream of their own, by
/// CUDA events.
pub fn host_to_device_rates(
    gpu: &Gpu,
    bytes: usize,
    chunk_bytes: usize,
    runs: usize,
) -> Result<LinkRates, GpuError> {
    if bytes == 0 || chunk_bytes == 0 || runs == 0 {
        return Err(GpuError::Invalid("a link measurement of nothing".into()));
    }
    let stream = gpu.new_stream()?;
    // SAFETY: only written by the copies below, never read on the host.
    let mut dst: CudaSlice<u8> = unsafe { stream.alloc::<u8>(bytes) }.during("allocating device memory")?;
    let allocated = {
        // SAFETY: uninitialised bytes are copied, never interpreted.
        let mem = unsafe { stream.context().alloc_pinned::<u8>(bytes) }.during("allocating pinned memory")?;
        let src: &[u8] = {
            let ptr = mem.as_ptr().during("reading pinned memory")?;
            // SAFETY: `mem` holds `bytes` bytes and outlives `src`'s uses below.
            unsafe { std::slice::from_raw_parts(ptr, bytes) }
        };
        median_gbps(gpu, &stream, bytes, runs, |s| {
            s.memcpy_htod(src, &mut dst.slice_mut(..)).during("copying to the device")
        })?
    };
    let host = vec![1u8; bytes];
    let _registration = gpu.register_host(host.as_ptr().cast(), bytes)?;
    let registered = median_gbps(gpu, &stream, bytes, runs, |s| {
        s.memcpy_htod(&host[..], &mut dst.slice_mut(..)).during("copying to the device")
    })?;
    let chunked = median_gbps(gpu, &stream, bytes, runs, |s| {
        for (k, part) in host.chunks(chunk_bytes).enumerate() {
            let at = k * chunk_bytes;
            s.memcpy_htod(part, &mut dst.slice_mut(at..at + part.len())).during("copying to the device")?;
        }
        Ok(())
    })?;
    stream.synchronize().during("waiting for the copies")?;
    Ok(LinkRates {
        bytes,
        allocated_gbps: allocated,
        registered_gbps: registered,
        registered_chunked_gbps: chunked,
        chunk_bytes,
    })
}

/// The median rate of `runs` timed calls of `copy` (one untimed first).
fn median_gbps(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    bytes: usize,
    runs: usize,
    mut copy: impl FnMut(&Arc<CudaStream>) -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    copy(stream)?;
    let timer = gpu.timer_on(stream)?;
    let mut rates = Vec::with_capacity(runs);
    for _ in 0..runs {
        timer.start()?;
        copy(stream)?;
        let ms = timer.stop()? as f64;
        rates.push(bytes as f64 / (ms / 1e3) / 1e9);
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates[rates.len() / 2])
}
