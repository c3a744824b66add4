//! The host-to-device link's rate, from the two kinds of page-locked
//! memory provd copies out of: memory the driver allocated page-locked
//! (`cuMemHostAlloc`, as the staging slots are) and memory allocated by the
//! host's allocator and page-locked in place (`cuMemHostRegister`, as a
//! streamed key's bases are). A streamed MSM reads its bases at ~16 GB/s on
//! the H200 machine while PyTorch's pinned copies ran at 55.5 GB/s there:
//! this tells whether the registered memory, or the MSM around the copy,
//! sets the pace (on the H100 machine both kinds copied at 55 GB/s, so the
//! MSM does: BENCHMARKS.md).

use std::sync::Arc;
use std::time::Instant;

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
    /// Out of ordinary host memory (a `Vec`) page-locked in place, copied whole.
    pub registered_gbps: f64,
    /// The same registered memory, copied `chunk_bytes` at a time back to
    /// back, as a streamed MSM copies its bases.
    pub registered_chunked_gbps: f64,
    pub chunk_bytes: usize,
}

/// Times `runs` copies of `bytes` (after one untimed) out of memory
/// allocated page-locked and out of a `Vec` page-locked in place, to one
/// device buffer, on a stream of their own, by CUDA events.
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
        let ptr = mem.as_ptr().during("reading pinned memory")?;
        // SAFETY: `mem` holds `bytes` bytes and outlives `src`, whose last
        // copy is waited for before `mem` drops (`median_gbps`).
        let src: &[u8] = unsafe { std::slice::from_raw_parts(ptr, bytes) };
        median_gbps(gpu, &stream, &mut dst, src, None, runs)?
    };
    drop(dst);
    let host = vec![1u8; bytes];
    Ok(LinkRates {
        bytes,
        allocated_gbps: allocated,
        registered_gbps: registered_rate(gpu, &host, None, runs)?,
        registered_chunked_gbps: registered_rate(gpu, &host, Some(chunk_bytes), runs)?,
        chunk_bytes,
    })
}

/// The rate of copies of `src` (ordinary host memory) through the device's
/// page-locked staging slots, as a proof's vectors go when they are not
/// registered: the host's cores copy into one slot while the link reads the
/// other. Host wall time from the first byte staged to the last copied,
/// the median of `runs` after one untimed.
pub fn staged_rate(gpu: &Gpu, src: &[u8], runs: usize) -> Result<f64, GpuError> {
    if src.is_empty() || runs == 0 {
        return Err(GpuError::Invalid("a link measurement of nothing".into()));
    }
    let stream = gpu.new_stream()?;
    // SAFETY: only written by the copies below, never read on the host.
    let mut dst: CudaSlice<u8> =
        unsafe { stream.alloc::<u8>(src.len()) }.during("allocating device memory")?;
    let mut copy = || -> Result<f64, GpuError> {
        let start = Instant::now();
        gpu.staging.lock().unwrap_or_else(|e| e.into_inner()).copy(&stream, src, &mut dst.slice_mut(..))?;
        stream.synchronize().during("waiting for the staged copy")?;
        Ok(start.elapsed().as_secs_f64())
    };
    copy()?;
    median_of(runs, || Ok(src.len() as f64 / copy()? / 1e9))
}

/// The rate at which `src` (ordinary host memory, every page touched) is
/// page-locked in place and released again (`cuMemHostRegister` and
/// `cuMemHostUnregister`), host wall time: what registering a vector for
/// one copy would cost. The median of `runs`.
pub fn register_rate(gpu: &Gpu, src: &[u8], runs: usize) -> Result<f64, GpuError> {
    if src.is_empty() || runs == 0 {
        return Err(GpuError::Invalid("a link measurement of nothing".into()));
    }
    median_of(runs, || {
        let start = Instant::now();
        drop(gpu.register_host(src.as_ptr().cast(), src.len())?);
        Ok(src.len() as f64 / start.elapsed().as_secs_f64() / 1e9)
    })
}

fn median_of(runs: usize, mut rate: impl FnMut() -> Result<f64, GpuError>) -> Result<f64, GpuError> {
    let mut rates = (0..runs).map(|_| rate()).collect::<Result<Vec<_>, _>>()?;
    rates.sort_by(f64::total_cmp);
    Ok(rates[rates.len() / 2])
}

/// The rate of copies out of `src` page-locked in place (for as long as
/// this takes), whole or `chunk` bytes at a time: the median of `runs`
/// after one untimed.
pub fn registered_rate(gpu: &Gpu, src: &[u8], chunk: Option<usize>, runs: usize) -> Result<f64, GpuError> {
    if src.is_empty() || chunk == Some(0) || runs == 0 {
        return Err(GpuError::Invalid("a link measurement of nothing".into()));
    }
    let stream = gpu.new_stream()?;
    // SAFETY: only written by the copies below, never read on the host.
    let mut dst: CudaSlice<u8> =
        unsafe { stream.alloc::<u8>(src.len()) }.during("allocating device memory")?;
    // Unregistered when dropped, after `median_gbps` waited for the copies.
    let _registration = gpu.register_host(src.as_ptr().cast(), src.len())?;
    median_gbps(gpu, &stream, &mut dst, src, chunk, runs)
}

/// The median rate of `runs` timed copies of `src` into `dst` (one untimed
/// first), whole or `chunk` bytes at a time; every copy is waited for.
fn median_gbps(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    dst: &mut CudaSlice<u8>,
    src: &[u8],
    chunk: Option<usize>,
    runs: usize,
) -> Result<f64, GpuError> {
    let mut copy = || -> Result<(), GpuError> {
        for (k, part) in src.chunks(chunk.unwrap_or(src.len())).enumerate() {
            let at = k * chunk.unwrap_or(0);
            stream
                .memcpy_htod(part, &mut dst.slice_mut(at..at + part.len()))
                .during("copying to the device")?;
        }
        Ok(())
    };
    copy()?;
    let timer = gpu.timer_on(stream)?;
    median_of(runs, || {
        timer.start()?;
        copy()?;
        let ms = f64::from(timer.stop()?);
        Ok(src.len() as f64 / (ms / 1e3) / 1e9)
    })
}
