//! Multi-scalar multiplication over G1 and G2 on the device (Pippenger,
//! signed digits, counting sort by bucket, equal work per thread; see
//! `cuda/msm.cu`).

mod bases;
mod curve;

pub use bases::{shifted_copies, shifted_window_bits, Bases, G1Bases, G2Bases, HostBases, HostView};
pub use curve::{
    AffineRaw, Fp2Raw, G1AffineRaw, G1XyzzRaw, G2AffineRaw, G2XyzzRaw, MsmCurve, XyzzRaw, G1, G2,
};

use std::sync::Arc;

use blstrs::Scalar;
use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use group::Group;

use crate::device::Gpu;
use crate::error::{During, GpuError};
use crate::field::{as_raw, FrRaw};

/// How one MSM finds its bases.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// One base per term; each window has its own buckets.
    Plain,
    /// Copies of `stride` points, copy w shifted by c·w bits: one bucket set.
    Shifted { c: u32, stride: u32 },
}

/// The shape of one MSM: windows, bucket sets, and how each step's work is
/// cut across the GPU. Host arithmetic only, so it is tested without a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    /// Window width in bits, and windows to cover a 255-bit scalar with
    /// signed digits (and the last carry).
    c: u32,
    windows: u32,
    /// Bucket sets: one per window (plain), or one for all (shifted).
    sets: u32,
    /// 1 when every window shares one set (msm_digits' flag).
    shared: u32,
    /// Base index distance between windows' copies; 0 for plain bases.
    stride: u32,
    /// Threads of the accumulation: as many as fit the GPU at once.
    accumulate_threads: u32,
    /// Chunks per set in the bucket reduction: one full wave over all sets,
    /// each chunk at least 16 buckets.
    chunks: u32,
    /// Blocks of msm_fixup_long, which loop over the buckets listed for them.
    fixup_long_blocks: u32,
}

impl Plan {
    fn new(n: usize, layout: Layout, multiprocessors: u32, bucket_bytes: usize) -> Self {
        let (c, shared, stride) = match layout {
            Layout::Plain => (window_bits(n, bucket_bytes), 0, 0),
            Layout::Shifted { c, stride } => (c, 1, stride),
        };
        let windows = 256u32.div_ceil(c);
        let sets = if shared == 1 { 1 } else { windows };
        let buckets_per_set = 1u32 << (c - 1);
        let wave = multiprocessors * REDUCE_BLOCKS_PER_SM * HEAVY_BLOCK;
        Self {
            c,
            windows,
            sets,
            shared,
            stride,
            accumulate_threads: (multiprocessors * HEAVY_BLOCK * ACCUMULATE_BLOCKS_PER_SM).max(1),
            chunks: (wave / sets).clamp(1, (buckets_per_set / 16).max(1)),
            fixup_long_blocks: (2 * multiprocessors).max(1),
        }
    }

    /// Buckets over all sets.
    fn buckets(&self) -> u32 {
        self.sets << (self.c - 1)
    }

    /// Bucket ranges [lo, hi) of the scatter's passes.
    fn scatter_passes(&self) -> impl Iterator<Item = (u32, u32)> {
        let total = self.buckets();
        (0..total)
            .step_by(SCATTER_PASS_BUCKETS as usize)
            .map(move |lo| (lo, total.min(lo + SCATTER_PASS_BUCKETS)))
    }
}

/// (sums per set, groups per set) of each level of msm_sum_groups over `m`
/// sums per set, until one sum per set is left.
fn tree_levels(m: u32) -> impl Iterator<Item = (u32, u32)> {
    std::iter::successors(Some(m), |m| Some(m.div_ceil(HEAVY_BLOCK)))
        .take_while(|m| *m > 1)
        .map(|m| (m, m.div_ceil(HEAVY_BLOCK)))
}

/// Launches kernel `$name` on the stream of MSM engine `$msm` with `$cfg`
/// and the arguments in order.
macro_rules! launch {
    ($msm:expr, $name:expr, $cfg:expr, $($arg:expr),+) => {{
        let name: &str = &$name;
        let f = $msm.gpu.function(name)?;
        let mut b = $msm.stream.launch_builder(&f);
        $(b.arg($arg);)+
        // SAFETY: argument types and order match the kernel's signature.
        unsafe { b.launch($cfg) }.map(drop).during(format!("launching {name}"))
    }};
}

/// Blocks of msm_accumulate resident per SM: its `__launch_bounds__` caps
/// registers at 128 so that four fit (three at 166 registers before).
const ACCUMULATE_BLOCKS_PER_SM: u32 = 4;

/// Blocks of msm_bucket_reduce resident per SM (its launch bounds; four, at
/// 128 registers with 148 bytes spilled, measured no faster: 6.64 against
/// 6.55 ms at 2^24 shifted, the same additions per SM per second as the plain
/// reduction at two blocks per SM, so not latency-bound). The
/// reduction runs one full wave of threads over all bucket sets: fewer
/// leave SMs idle (16 × 128 threads took 28 ms at 2^22, by ncu), more make a
/// second, partial wave, each thread paying its chunk's fixed cost (scaling
/// by the chunk's first index) again.
const REDUCE_BLOCKS_PER_SM: u32 = 3;

/// The MSM engine of one device (G1 and G2), its work queued on one stream.
pub struct Msm {
    gpu: Arc<Gpu>,
    /// Where its kernels, buffers and read-backs go: the device's own
    /// stream, or one of the engine's own ([`Msm::on_own_stream`]).
    stream: Arc<CudaStream>,
}

/// An MSM of n terms needs at least n bases and n scalars.
fn check_terms(n: usize, bases: usize, scalars: usize) -> Result<(), GpuError> {
    if n > bases || n > scalars {
        return Err(GpuError::Invalid(format!("{n} terms for {bases} bases and {scalars} scalars")));
    }
    Ok(())
}

/// Threads per block for kernels doing curve arithmetic: they use up to 255
/// registers per thread, and a block may hold 65536.
const HEAVY_BLOCK: u32 = 128;

/// Buckets per pass of the scatter: 2^20 partly written 32-byte sectors (32
/// MiB) and their cursors fit the H200's 50 MB L2. Plain windows (2^19
/// buckets at most) take one pass; shifted bases at 2^24 two, at 2^26 eight.
const SCATTER_PASS_BUCKETS: u32 = 1 << 20;

/// Threads per block and elements per tile of the scan kernels (SCAN_THREADS
/// and SCAN_TILE in `cuda/msm.cu`).
const SCAN_THREADS: u32 = 1024;
const SCAN_TILE: u32 = 16 * SCAN_THREADS;

fn heavy(threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (threads.div_ceil(HEAVY_BLOCK), 1, 1),
        block_dim: (HEAVY_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Device bytes an MSM's bucket tables take at most (every bucket set, as
/// XYZZ points): the cap on a plain layout's wide windows, and what G1's
/// shifted layout at c = 24 (one set of 2^23) takes. The device's working
/// reservation counts it.
pub const MAX_BUCKET_BYTES: u64 = 3 << 29;

/// Points from which a plain-layout MSM takes [`WIDE_WINDOW_BITS`].
const WIDE_FROM: usize = 1 << 26;
/// 13 windows of 20 bits instead of 16 of 16: 19% fewer additions, 6.8M
/// buckets. Measured on the H200 (686e03d, `provd bench msm`, plain bases):
/// 2^26 520 → 498 ms, 2^27 1022 → 959 ms, but 2^24 even (137.0 against
/// 137.8) and 2^22 at 18 bits 9% slower, as the runs per bucket shorten.
const WIDE_WINDOW_BITS: u32 = 20;

/// Window width for n points in the plain layout (each window its own
/// buckets): log2(n) − 2, at most 16; [`WIDE_WINDOW_BITS`] from
/// [`WIDE_FROM`] points where the bucket tables fit [`MAX_BUCKET_BYTES`]
/// (G1's do; G2's, twice as large, keep 16).
fn window_bits(n: usize, bucket_bytes: usize) -> u32 {
    let c = WIDE_WINDOW_BITS;
    let wide_bytes = (256u64.div_ceil(c as u64) << (c - 1)) * bucket_bytes as u64;
    if n >= WIDE_FROM && wide_bytes <= MAX_BUCKET_BYTES {
        return c;
    }
    let log = usize::BITS - n.max(1).leading_zeros();
    log.saturating_sub(3).clamp(4, 16)
}

impl Msm {
    /// An engine on the device's own stream ([`Gpu::stream`]), ordered with
    /// the device's other kernels.
    pub fn new(gpu: Arc<Gpu>) -> Self {
        let stream = gpu.stream().clone();
        Self { gpu, stream }
    }

    /// An engine on a stream of its own, whose MSMs run beside those of the
    /// device's stream (a streamed key's L beside its H, whose kernels leave
    /// the link idle). A buffer it reads that another stream wrote is waited
    /// for: cudarc records each buffer's last write and read as events and
    /// orders the streams by them.
    pub fn on_own_stream(gpu: Arc<Gpu>) -> Result<Self, GpuError> {
        let stream = gpu.new_stream()?;
        Ok(Self { gpu, stream })
    }

    /// `len` zeroed elements, allocated on this engine's stream.
    fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>, GpuError> {
        self.stream.alloc_zeros(len).during("allocating device memory")
    }

    /// Waits for this engine's work (a read-back) to finish.
    fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().during("waiting for the device")
    }

    /// Σ `scalars[i]·bases[i]` over the first `scalars.len()` bases.
    pub fn run<C: MsmCurve>(&self, bases: &Bases<C>, scalars: &[Scalar]) -> Result<C::Projective, GpuError> {
        let n = scalars.len();
        check_terms(n, bases.len(), n)?; // before copying the scalars
        if n == 0 {
            return Ok(C::Projective::identity());
        }
        let scalars: CudaSlice<FrRaw> = self.stream.clone_htod(as_raw(scalars)).during("copying scalars")?;
        self.run_device(bases, &scalars, n)
    }

    /// As [`Msm::run`], with the scalars already on the device.
    pub fn run_device<C: MsmCurve>(
        &self,
        bases: &Bases<C>,
        scalars: &CudaSlice<FrRaw>,
        n: usize,
    ) -> Result<C::Projective, GpuError> {
        check_terms(n, bases.len(), scalars.len())?;
        if n == 0 {
            return Ok(C::Projective::identity());
        }
        match bases.shift_bits {
            // Shifts pay once there are enough terms for the wide bucket set.
            Some(c) if n >= 1 << (c - 1) => {
                let layout = Layout::Shifted { c, stride: bases.len as u32 };
                self.run_views::<C>(&bases.points.slice(..), &scalars.slice(..n), n, layout)
            }
            _ => self.run_views::<C>(&bases.points.slice(..n), &scalars.slice(..n), n, Layout::Plain),
        }
    }

    /// Σ `scalars[i]·bases[i]` over the first `n` bases, read from the host's
    /// memory `chunk` bases at a time: chunk k+1 is copied (DMA, on a second
    /// stream) while chunk k is summed, so the device holds two chunks of
    /// the bases and one chunk's MSM working memory, however many bases.
    pub fn run_streamed<C: MsmCurve>(
        &self,
        bases: HostView<'_, C>,
        chunk: usize,
        scalars: &CudaSlice<FrRaw>,
        n: usize,
    ) -> Result<C::Projective, GpuError> {
        check_terms(n, bases.len(), scalars.len())?;
        let chunk = chunk.clamp(1, n.max(1));
        let needed = n.div_ceil(chunk);
        if needed == 0 {
            return Ok(C::Projective::identity());
        }
        let points = bases.points;
        let copy = self.gpu.new_stream()?;
        let alloc = || unsafe { copy.alloc::<C::AffineRaw>(chunk) }.during("allocating a bases chunk");
        let mut bufs = [alloc()?, alloc()?];
        let part = |k: usize| &points[k * chunk..((k + 1) * chunk).min(n)];
        // The copies read registered (page-locked) memory: asynchronous DMA.
        copy.memcpy_htod(part(0), &mut bufs[0].slice_mut(..part(0).len())).during("copying bases")?;
        let mut ready = copy.record_event(None).during("recording an event")?;
        let mut acc = C::Projective::identity();
        for k in 0..needed {
            let (start, len) = (k * chunk, part(k).len());
            self.stream.wait(&ready).during("waiting for a copy")?;
            let (a, b) = bufs.split_at_mut(1);
            let (cur, next) = if k % 2 == 0 { (&a[0], &mut b[0]) } else { (&b[0], &mut a[0]) };
            if k + 1 < needed {
                // `next` held chunk k−1, whose MSM has returned (its sums were read back).
                let src = part(k + 1);
                copy.memcpy_htod(src, &mut next.slice_mut(..src.len())).during("copying bases")?;
                ready = copy.record_event(None).during("recording an event")?;
            }
            acc += self.run_views::<C>(
                &cur.slice(..len),
                &scalars.slice(start..start + len),
                len,
                Layout::Plain,
            )?;
        }
        Ok(acc)
    }

    /// The MSM of `n` > 0 terms over device views laid out as `layout` says.
    fn run_views<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        scalars: &CudaView<FrRaw>,
        n: usize,
        layout: Layout,
    ) -> Result<C::Projective, GpuError> {
        if n >= 1 << 31 {
            return Err(GpuError::Invalid("an MSM takes fewer than 2^31 points".into()));
        }
        // The split reads the bases plain: a shifted table's first copy.
        if let Some(sum) = self.run_split::<C>(&bases.slice(..n), scalars, n)? {
            return Ok(sum);
        }
        self.pippenger::<C>(bases, scalars, Terms::All(n), layout)
    }

    /// A witness's MSM, split by scalar: the zeros dropped, the ones' bases
    /// summed, and Pippenger over the wider terms only (a 32 GiB partition's
    /// L: 1.3% of its terms). `None` where more than half the terms are
    /// wider, for Pippenger over them all: the split would save little.
    /// Its device memory (a list of n indices, then Pippenger's over at most
    /// n/2 terms) stays under Pippenger's over all n.
    fn run_split<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        scalars: &CudaView<FrRaw>,
        n: usize,
    ) -> Result<Option<C::Projective>, GpuError> {
        let stream = &self.stream;
        let n32 = n as u32;
        // The ones from the front of `list`, the wider terms from its back.
        let mut list = unsafe { stream.alloc::<u32>(n) }.during("allocating the term lists")?;
        let mut counts = self.zeros::<u32>(2)?;
        launch!(
            self,
            "msm_classify",
            LaunchConfig::for_num_elems(n32),
            scalars,
            &n32,
            &mut list,
            &mut counts
        )?;
        let counts = stream.clone_dtoh(&counts).during("copying the term counts")?;
        self.synchronize()?;
        let (ones, wide) = (counts[0] as usize, counts[1] as usize);
        if 2 * wide > n {
            return Ok(None);
        }
        let ones_sum =
            (ones > 0).then(|| self.sum_listed::<C>(bases, &list.slice(..ones), ones)).transpose()?;
        let mut acc = C::Projective::identity();
        if wide > 0 {
            acc =
                self.pippenger::<C>(bases, scalars, Terms::Listed(&list.slice(n - wide..)), Layout::Plain)?;
        }
        if let Some(sum) = ones_sum {
            let sum = stream.clone_dtoh(&sum).during("copying the ones' sum")?;
            self.synchronize()?;
            acc += C::xyzz_to_projective(&sum[0]);
        }
        Ok(Some(acc))
    }

    /// Σ bases[list[k]] over the `count` > 0 listed terms, left on the device
    /// (one point): a strided sum per thread, then trees of
    /// [`HEAVY_BLOCK`].
    fn sum_listed<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        list: &CudaView<u32>,
        count: usize,
    ) -> Result<CudaSlice<C::XyzzRaw>, GpuError> {
        let sms = self.gpu.info().multiprocessors;
        let plan = Plan::new(count, Layout::Plain, sms, std::mem::size_of::<C::XyzzRaw>());
        let threads = plan.accumulate_threads.min((count as u32).next_multiple_of(HEAVY_BLOCK));
        let mut sums = self.zeros::<C::XyzzRaw>(threads as usize)?;
        let count32 = count as u32;
        launch!(self, C::kernel("msm_sum_listed"), heavy(threads), bases, list, &count32, &mut sums)?;
        self.sum_tree::<C>(sums, 1, threads)
    }

    /// One sum per set of `m` sums (set w at `sums[w·m..]`), added as trees
    /// by msm_sum_groups.
    fn sum_tree<C: MsmCurve>(
        &self,
        mut sums: CudaSlice<C::XyzzRaw>,
        sets: u32,
        m: u32,
    ) -> Result<CudaSlice<C::XyzzRaw>, GpuError> {
        for (m, groups) in tree_levels(m) {
            let mut out = self.zeros::<C::XyzzRaw>((sets * groups) as usize)?;
            let cfg = LaunchConfig {
                grid_dim: (sets * groups, 1, 1),
                block_dim: (HEAVY_BLOCK, 1, 1),
                shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
            };
            launch!(self, C::kernel("msm_sum_groups"), cfg, &sums, &m, &HEAVY_BLOCK, &groups, &mut out)?;
            sums = out;
        }
        Ok(sums)
    }

    /// Pippenger over the `terms` of device views laid out as `layout` says.
    fn pippenger<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        scalars: &CudaView<FrRaw>,
        terms: Terms<'_>,
        layout: Layout,
    ) -> Result<C::Projective, GpuError> {
        let stream = &self.stream;
        let n = terms.len();
        let plan = Plan::new(n, layout, self.gpu.info().multiprocessors, std::mem::size_of::<C::XyzzRaw>());
        let Plan { c, windows, sets, shared, stride, .. } = plan;
        let nbuckets = plan.buckets() as usize;
        let n32 = n as u32;

        // 1. digits and bucket sizes
        let count = windows as u64 * n as u64;
        let mut keys = unsafe { stream.alloc::<u32>(count as usize) }.during("allocating digit keys")?;
        let mut counts = self.zeros::<u32>(nbuckets)?;
        let digits_cfg = LaunchConfig::for_num_elems(n32);
        match terms {
            Terms::All(_) => {
                launch!(
                    self,
                    "msm_digits",
                    digits_cfg,
                    scalars,
                    &n32,
                    &c,
                    &windows,
                    &shared,
                    &mut keys,
                    &mut counts
                )
            }
            Terms::Listed(map) => launch!(
                self,
                "msm_digits_mapped",
                digits_cfg,
                scalars,
                map,
                &n32,
                &c,
                &windows,
                &shared,
                &mut keys,
                &mut counts
            ),
        }?;
        // 2. counting sort by bucket
        let mut offsets = self.zeros::<u32>(nbuckets + 1)?;
        let nb32 = nbuckets as u32;
        let tiles = nb32.div_ceil(SCAN_TILE);
        let mut tile_sums = self.zeros::<u32>(tiles as usize + 1)?;
        let mut tile_offsets = self.zeros::<u32>(tiles as usize + 1)?;
        let scan_cfg = |blocks: u32| LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (SCAN_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(self, "scan_tile_sums", scan_cfg(tiles), &counts, &nb32, &mut tile_sums)?;
        launch!(self, "scan_exclusive", scan_cfg(1), &tile_sums, &mut tile_offsets, &tiles)?;
        launch!(self, "scan_tiles", scan_cfg(tiles), &counts, &nb32, &tile_offsets, &mut offsets)?;
        drop((tile_sums, tile_offsets));
        let mut cursor = stream.clone_dtod(&offsets).during("copying offsets")?;
        let mut sorted_idx =
            unsafe { stream.alloc::<u32>(count as usize) }.during("allocating the sorted list")?;
        let scatter_cfg = LaunchConfig {
            grid_dim: (count.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        for (lo, hi) in plan.scatter_passes() {
            match terms {
                Terms::All(_) => launch!(
                    self,
                    "msm_scatter",
                    scatter_cfg,
                    &keys,
                    &count,
                    &mut cursor,
                    &mut sorted_idx,
                    &n32,
                    &stride,
                    &lo,
                    &hi
                ),
                Terms::Listed(map) => launch!(
                    self,
                    "msm_scatter_mapped",
                    scatter_cfg,
                    &keys,
                    map,
                    &count,
                    &mut cursor,
                    &mut sorted_idx,
                    &n32,
                    &stride,
                    &lo,
                    &hi
                ),
            }?;
        }
        drop((keys, cursor, counts));
        // 3. bucket sums, equal segments per thread
        let threads = plan.accumulate_threads;
        let mut buckets = self.zeros::<C::XyzzRaw>(nbuckets)?;
        let mut part_key = self.zeros::<u32>(2 * threads as usize)?;
        let mut part_val = self.zeros::<C::XyzzRaw>(2 * threads as usize)?;
        launch!(
            self,
            C::kernel("msm_accumulate"),
            heavy(threads),
            bases,
            &sorted_idx,
            &offsets,
            &nb32,
            &threads,
            &mut buckets,
            &mut part_key,
            &mut part_val
        )?;
        // Crossing buckets: a thread each, then a block each for those with many partials.
        let slots = 2 * threads;
        let mut long_starts = self.zeros::<u32>(threads as usize)?;
        let mut long_count = self.zeros::<u32>(1)?;
        launch!(
            self,
            C::kernel("msm_fixup"),
            heavy(slots),
            &part_key,
            &part_val,
            &slots,
            &mut buckets,
            &mut long_starts,
            &mut long_count
        )?;
        let long_cfg = LaunchConfig {
            grid_dim: (plan.fixup_long_blocks, 1, 1),
            block_dim: (HEAVY_BLOCK, 1, 1),
            shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
        };
        launch!(
            self,
            C::kernel("msm_fixup_long"),
            long_cfg,
            &part_key,
            &part_val,
            &slots,
            &long_starts,
            &long_count,
            &mut buckets
        )?;
        drop((sorted_idx, offsets, part_key, part_val, long_starts, long_count));
        // 4. Σ (b+1)·B_b per bucket set, in chunks
        let chunks = plan.chunks;
        let mut sums = self.zeros::<C::XyzzRaw>((sets * chunks) as usize)?;
        launch!(
            self,
            C::kernel("msm_bucket_reduce"),
            heavy(sets * chunks),
            &buckets,
            &c,
            &sets,
            &chunks,
            &mut sums
        )?;
        drop(buckets);
        // 5. the chunk sums of each set added as trees, 128 at a time
        let window_out = self.sum_tree::<C>(sums, sets, chunks)?;
        let sums = stream.clone_dtoh(&window_out).during("copying window sums")?;
        self.synchronize()?;
        // Σ_w 2^(c·w)·W_w by Horner's rule (one term when the bases are shifted).
        let mut acc = C::Projective::identity();
        for w in sums.iter().rev() {
            for _ in 0..c {
                acc = acc.double();
            }
            acc += C::xyzz_to_projective(w);
        }
        Ok(acc)
    }
}

/// The terms Pippenger sums: the first n of its views, or those a list of
/// indices names (a split MSM's wider terms).
#[derive(Clone, Copy)]
enum Terms<'a> {
    All(usize),
    Listed(&'a CudaView<'a, u32>),
}

impl Terms<'_> {
    fn len(&self) -> usize {
        match self {
            Terms::All(n) => *n,
            Terms::Listed(list) => list.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_on_an_h200() {
        let sms = 132;
        let g1 = std::mem::size_of::<G1XyzzRaw>();
        let plain = Plan::new(1 << 20, Layout::Plain, sms, g1);
        assert_eq!((plain.c, plain.windows, plain.sets, plain.shared, plain.stride), (16, 16, 16, 0, 0));
        assert_eq!((plain.buckets(), plain.accumulate_threads, plain.chunks), (1 << 19, 132 * 128 * 4, 2048));
        assert_eq!(plain.scatter_passes().collect::<Vec<_>>(), [(0, 1 << 19)]);
        assert_eq!(tree_levels(plain.chunks).collect::<Vec<_>>(), [(2048, 16), (16, 1)]);
        // wider windows for large MSMs: 13 of 20 bits, 6.8M buckets in 7 scatter passes
        let wide = Plan::new(1 << 27, Layout::Plain, sms, g1);
        assert_eq!((wide.c, wide.windows, wide.buckets()), (20, 13, 13 << 19));
        assert_eq!((wide.chunks, wide.scatter_passes().count()), (132 * 3 * 128 / 13, 7));

        let shifted = Plan::new(1 << 24, Layout::Shifted { c: 22, stride: 1 << 24 }, sms, g1);
        assert_eq!((shifted.windows, shifted.sets, shifted.shared, shifted.buckets()), (12, 1, 1, 1 << 21));
        assert_eq!(shifted.chunks, 132 * 3 * 128, "one full wave of the reduction");
        assert_eq!(shifted.scatter_passes().collect::<Vec<_>>(), [(0, 1 << 20), (1 << 20, 1 << 21)]);
        assert_eq!(tree_levels(shifted.chunks).collect::<Vec<_>>(), [(50688, 396), (396, 4), (4, 1)]);
        assert_eq!(shifted.fixup_long_blocks, 2 * 132);

        let big = Plan::new(1 << 26, Layout::Shifted { c: 24, stride: 1 << 26 }, sms, g1);
        assert_eq!((big.windows, big.scatter_passes().count()), (11, 8));

        // one term: 4-bit windows, one bucket per chunk, nothing left to sum
        let one = Plan::new(1, Layout::Plain, sms, g1);
        assert_eq!((one.c, one.windows, one.buckets(), one.chunks), (4, 64, 64 * 8, 1));
        assert_eq!(tree_levels(one.chunks).count(), 0);
    }

    #[test]
    fn plain_windows_widen_for_the_largest_msms_where_buckets_fit() {
        let (g1, g2) = (std::mem::size_of::<G1XyzzRaw>(), std::mem::size_of::<G2XyzzRaw>());
        let widths = |bytes| [10, 16, 20, 22, 24, 26, 27].map(|log| window_bits(1 << log, bytes));
        assert_eq!(widths(g1), [8, 14, 16, 16, 16, 20, 20]);
        assert_eq!(widths(g2), [8, 14, 16, 16, 16, 16, 16], "G2's buckets are twice as large");
        for (log, bytes) in (0..31).flat_map(|log| [(log, g1), (log, g2)]) {
            let c = window_bits(1 << log, bytes);
            let buckets = 256u64.div_ceil(c as u64) << (c - 1);
            assert!(buckets * bytes as u64 <= MAX_BUCKET_BYTES, "2^{log}: c = {c}");
            assert!(buckets < 1 << 31, "bucket keys carry the sign in bit 31");
        }
    }

    #[test]
    fn shifted_tables_fit_the_kernels_limits() {
        assert_eq!(shifted_window_bits(1 << 24), 22);
        assert_eq!(shifted_window_bits(1 << 26), 24);
        assert_eq!(shifted_copies(1 << 24), Some(12));
        assert_eq!(shifted_copies(1 << 26), Some(11));
        // past the kernels' 2^31 indices the backend keeps such bases plain
        assert_eq!(shifted_copies(1 << 28), None);
        for log in 0..=27 {
            let len = 1usize << log;
            let c = shifted_window_bits(len);
            let buckets = 1u64 << (c - 1);
            assert!(
                buckets * std::mem::size_of::<G1XyzzRaw>() as u64 <= MAX_BUCKET_BYTES,
                "2^{log}: c = {c}"
            );
            let copies = 256u32.div_ceil(c);
            assert!(copies <= 32, "SHIFT_MAX_COPIES in msm.cu: 2^{log} takes {copies}");
            assert!((len as u64) * (copies as u64) < 1 << 31, "2^{log}: indices with the sign bit");
        }
    }

    /// The host's launch arithmetic mirrors constants of `cuda/msm.cu`.
    #[test]
    fn host_constants_match_the_kernels() {
        let src = crate::compile::kernel_source();
        for needle in [
            format!("#define SCAN_THREADS {SCAN_THREADS}u"),
            "#define SCAN_TILE (16u * SCAN_THREADS)".to_string(),
            format!("MSM_KERNELS(, g1_affine, g1_xyzz, {ACCUMULATE_BLOCKS_PER_SM}, {REDUCE_BLOCKS_PER_SM})"),
            "#define SHIFT_MAX_COPIES 32u".to_string(),
        ] {
            assert!(src.contains(&needle), "cuda/msm.cu no longer has `{needle}`");
        }
        assert_eq!(SCAN_TILE, 16 * SCAN_THREADS);
    }
}
