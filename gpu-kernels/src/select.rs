//! Scalars picked out by a density bitmap, on the device (`cuda/select.cu`).
//!
//! A Groth16 prover's A and B queries have bases only for the variables that
//! appear in them, so their MSMs take that subset of the assignment, in
//! order. Picking it from the assignment already on the device costs a
//! kernel over it and a copy of the bitmap (1/256 of the scalars' bytes),
//! where filtering on the host costs a pass over the scalars and a copy of
//! the subset for every query.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use crate::device::Gpu;
use crate::error::{During, GpuError};
use crate::field::FrRaw;

/// The scalars of `src[..len]` whose bit is set in `words` (bit i of word
/// i / 64, least significant first), in order, as a new device buffer of
/// `max(1, ones)` elements: pass `ones` (the number of set bits) as the
/// MSM's term count. Bits at or past `len` must be clear.
pub fn select_by_density(
    gpu: &Gpu,
    src: &CudaSlice<FrRaw>,
    len: usize,
    words: &[u64],
) -> Result<(CudaSlice<FrRaw>, usize), GpuError> {
    if len > src.len() || words.len() != len.div_ceil(64) || len > u32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "a bitmap of {} words over {len} of {} scalars",
            words.len(),
            src.len()
        )));
    }
    if let Some(&last) = words.last() {
        let used = len - 64 * (words.len() - 1);
        if used < 64 && last >> used != 0 {
            return Err(GpuError::Invalid(format!("bits set past the {len} scalars")));
        }
    }
    // The rank of each word's first bit: a prefix sum of popcounts (len / 64
    // words, done here rather than by a scan on the device).
    let mut ranks = Vec::with_capacity(words.len());
    let mut ones = 0u32;
    for w in words {
        ranks.push(ones);
        ones += w.count_ones();
    }
    let stream = gpu.stream();
    let mut dst = gpu.zeros::<FrRaw>((ones as usize).max(1))?;
    if ones > 0 {
        let words_d = stream.clone_htod(words).during("copying a density bitmap")?;
        let ranks_d = stream.clone_htod(&ranks).during("copying a density bitmap")?;
        let n = len as u32;
        let f = gpu.function("select_by_density")?;
        let mut b = stream.launch_builder(&f);
        b.arg(src).arg(&n).arg(&words_d).arg(&ranks_d).arg(&mut dst);
        // SAFETY: argument types and order match the kernel's signature; the
        // ranks of set bits are < ones = dst.len().
        unsafe { b.launch(LaunchConfig::for_num_elems(n)) }
            .map(drop)
            .during("launching select_by_density")?;
    }
    Ok((dst, ones as usize))
}
