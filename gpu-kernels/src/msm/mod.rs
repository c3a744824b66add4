//! Multi-scalar multiplication over G1 and G2 on the device (Pippenger,
//! signed digits, counting sort by bucket, equal work per thread; see
//! `cuda/msm.cu`).

mod bases;
mod curve;

pub use bases::{shifted_copies, shifted_window_bits, Bases, G1Bases, G2Bases, PinnedBases};
pub use curve::{
    AffineRaw, Fp2Raw, G1AffineRaw, G1XyzzRaw, G2AffineRaw, G2XyzzRaw, MsmCurve, XyzzRaw, G1, G2,
};

use std::sync::Arc;

use blstrs::{G1Projective, Scalar};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
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
    fn new(n: usize, layout: Layout, multiprocessors: u32) -> Self {
        let (c, shared, stride) = match layout {
            Layout::Plain => (window_bits(n), 0, 0),
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

    /// (sums per set, groups per set) of each level of msm_sum_groups, until
    /// one sum per set is left.
    fn sum_levels(&self) -> impl Iterator<Item = (u32, u32)> {
        std::iter::successors(Some(self.chunks), |m| Some(m.div_ceil(HEAVY_BLOCK)))
            .take_while(|m| *m > 1)
            .map(|m| (m, m.div_ceil(HEAVY_BLOCK)))
    }
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

/// Launches kernel `name` on the device's stream with the arguments given.
macro_rules! launch {
    ($gpu:expr, $name:expr, $cfg:expr, $($arg:expr),+) => {{
        let gpu: &Gpu = $gpu;
        let name: &str = &$name;
        let f = gpu.function(name)?;
        let mut b = gpu.stream().launch_builder(&f);
        $(b.arg($arg);)+
        // SAFETY: argument types and order match the kernel's signature.
        unsafe { b.launch($cfg) }.map(drop).during(format!("launching {name}"))
    }};
}

/// Rounds of affine pair additions before the XYZZ accumulation (G1 only):
/// each round halves every bucket's list at ~6 multiplications an addition,
/// where the accumulation's XYZZ additions cost ~10 (see `cuda/msm.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairRounds {
    /// Rounds; 0 turns them off.
    pub rounds: u32,
    /// Entries of the sorted list a chunk of rounds covers. Its lists take
    /// 96 bytes for each of ~3/4 of them (rounds 1 and 2), and an
    /// inversion is shared by about chunk / 2^(r+1) / threads additions in
    /// round r, so the chunk trades device memory for fewer inversions.
    pub chunk: u32,
    /// Sorted lists shorter than this skip the rounds.
    pub min_entries: u64,
    /// Blocks of 128 threads of a round per SM, 2 to 4: the kernel's
    /// register cap (255, 168 or 128) against the threads that share its
    /// inversions and hide its loads.
    pub blocks_per_sm: u32,
}

impl PairRounds {
    /// XYZZ accumulation alone.
    pub const OFF: Self = Self { rounds: 0, chunk: 1, min_entries: u64::MAX, blocks_per_sm: 4 };

    fn apply_to(&self, entries: u64) -> bool {
        self.rounds > 0 && entries >= self.min_entries.max(1)
    }

    /// Device bytes the rounds' lists take at most in an MSM of `terms`
    /// terms (none where the rounds are off or the MSM too small for them).
    pub fn scratch_bytes(&self, terms: usize) -> u64 {
        // plain layouts have the most entries: ⌈256 / c⌉ windows of n
        let entries = terms as u64 * 256u64.div_ceil(window_bits(terms) as u64);
        if !self.apply_to(entries) {
            return 0;
        }
        let chunk = entries.min(self.chunk as u64);
        (list_len(chunk, 1, MAX_BUCKETS) + list_len(chunk, 2, MAX_BUCKETS)) * G1_AFFINE_BYTES
    }
}

impl Default for PairRounds {
    fn default() -> Self {
        Self { rounds: 3, chunk: 1 << 27, min_entries: 1 << 25, blocks_per_sm: 4 }
    }
}

/// Bucket sets' buckets at most: shifted bases at c = 24 (2^23), more than
/// plain windows ever have.
const MAX_BUCKETS: u64 = 1 << 23;
const G1_AFFINE_BYTES: u64 = std::mem::size_of::<G1AffineRaw>() as u64;

/// Length of round `r`'s list (r ≥ 1) for a chunk of `entries` sorted
/// entries over `buckets` buckets: half the round before's, and a spare slot
/// per bucket (`round_start` in `cuda/msm.cu`).
fn list_len(entries: u64, r: u32, buckets: u64) -> u64 {
    (entries >> r) + buckets
}

/// Additions each thread of a pair round should share an inversion among,
/// at least (an inversion costs ~500 multiplications): later rounds, with
/// fewer pairs, run fewer threads.
const PAIRS_PER_THREAD: u32 = 256;

/// The MSM engine of one device (G1 and G2).
pub struct Msm {
    gpu: Arc<Gpu>,
    pairs: PairRounds,
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

/// Window width for n points: wide enough that buckets are few against the
/// points, narrow enough that the bucket sums stay cheap.
fn window_bits(n: usize) -> u32 {
    let log = usize::BITS - n.max(1).leading_zeros();
    log.saturating_sub(3).clamp(4, 16)
}

impl Msm {
    pub fn new(gpu: Arc<Gpu>) -> Self {
        Self::with_pair_rounds(gpu, PairRounds::default())
    }

    /// An engine whose G1 MSMs run `pairs` (benchmarks and tests compare
    /// them with [`PairRounds::OFF`]).
    pub fn with_pair_rounds(gpu: Arc<Gpu>, pairs: PairRounds) -> Self {
        Self { gpu, pairs }
    }

    /// Σ `scalars[i]·bases[i]` over the first `scalars.len()` bases.
    pub fn run<C: MsmCurve>(&self, bases: &Bases<C>, scalars: &[Scalar]) -> Result<C::Projective, GpuError> {
        let gpu = &*self.gpu;
        let n = scalars.len();
        check_terms(n, bases.len(), n)?; // before copying the scalars
        if n == 0 {
            return Ok(C::Projective::identity());
        }
        let scalars: CudaSlice<FrRaw> = gpu.stream().clone_htod(as_raw(scalars)).during("copying scalars")?;
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

    /// Σ `scalars[i]·bases[i]` with the bases streamed from pinned host memory:
    /// chunk k+1 is copied on a second stream while chunk k is summed.
    pub fn run_streamed(
        &self,
        bases: &PinnedBases,
        scalars: &CudaSlice<FrRaw>,
        n: usize,
    ) -> Result<G1Projective, GpuError> {
        let gpu = &*self.gpu;
        check_terms(n, bases.len(), scalars.len())?;
        let needed = n.div_ceil(bases.chunk);
        if needed == 0 {
            return Ok(G1Projective::identity());
        }
        let copy = gpu.new_stream()?;
        let alloc = || unsafe { copy.alloc::<G1AffineRaw>(bases.chunk) }.during("allocating a bases chunk");
        let mut bufs = [alloc()?, alloc()?];
        let first = &bases.chunks[0];
        copy.memcpy_htod(first, &mut bufs[0].slice_mut(..first.len())).during("copying bases")?;
        let mut ready = copy.record_event(None).during("recording an event")?;
        let mut acc = G1Projective::identity();
        for k in 0..needed {
            let start = k * bases.chunk;
            let len = bases.chunk.min(n - start);
            gpu.stream().wait(&ready).during("waiting for a copy")?;
            let (a, b) = bufs.split_at_mut(1);
            let (cur, next) = if k % 2 == 0 { (&a[0], &mut b[0]) } else { (&b[0], &mut a[0]) };
            if k + 1 < needed {
                let src = &bases.chunks[k + 1];
                copy.memcpy_htod(src, &mut next.slice_mut(..src.len())).during("copying bases")?;
                ready = copy.record_event(None).during("recording an event")?;
            }
            let chunk = self.run_views::<G1>(
                &cur.slice(..len),
                &scalars.slice(start..start + len),
                len,
                Layout::Plain,
            )?;
            acc += chunk;
        }
        Ok(acc)
    }

    /// Step 3 for G1: affine pair rounds over the sorted list, a chunk at a
    /// time, each chunk's last list then summed into `buckets`.
    fn pair_rounds<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        sorted_idx: &CudaSlice<u32>,
        offsets: &CudaSlice<u32>,
        buckets: &mut CudaSlice<C::XyzzRaw>,
        accumulation: &mut Accumulation<C>,
    ) -> Result<(), GpuError> {
        let gpu = &*self.gpu;
        let stream = gpu.stream();
        let blocks = self.pairs.blocks_per_sm;
        if !(2..=4).contains(&blocks) {
            return Err(GpuError::Invalid(format!("{blocks} pair-round blocks per SM: 2 to 4")));
        }
        let round_kernel = format!("msm_pair_round_{blocks}");
        let round_threads = gpu.info().multiprocessors * HEAVY_BLOCK * blocks;
        let host_offsets = stream.clone_dtoh(offsets).during("copying bucket offsets")?;
        gpu.synchronize()?;
        let chunks = chunk_ranges(&host_offsets, self.pairs.chunk);
        let rounds = self.pairs.rounds;
        let longest = |r: u32| chunks.iter().map(|c| c.list_len(r)).max().unwrap_or(0) as usize;
        let alloc =
            |len: usize| unsafe { stream.alloc::<C::AffineRaw>(len.max(1)) }.during("allocating a pair list");
        // odd rounds' lists in lists[0], even rounds' in lists[1]
        let mut lists = [alloc(longest(1))?, alloc(if rounds >= 2 { longest(2) } else { 0 })?];
        let most_buckets = chunks.iter().map(|c| c.b_hi - c.b_lo).max().unwrap_or(0);
        let mut last_offsets = unsafe { stream.alloc::<u32>(most_buckets as usize + 1) }
            .during("allocating the pair lists' offsets")?;
        // The part of a chunk's first bucket that the chunk before summed.
        let mut carried = gpu.zeros::<C::XyzzRaw>(1)?;
        for (k, chunk) in chunks.iter().enumerate() {
            let Chunk { s, e, b_lo, b_hi } = *chunk;
            for r in 0..rounds {
                let out_len = chunk.list_len(r + 1);
                let threads = (out_len / PAIRS_PER_THREAD as u64).clamp(1, round_threads as u64) as u32;
                let (odd, even) = lists.split_at_mut(1);
                let (src, dst) = if r % 2 == 0 { (&even[0], &mut odd[0]) } else { (&odd[0], &mut even[0]) };
                let mut dst = dst.slice_mut(..out_len as usize);
                let args = (s, e, b_lo, b_hi, r, threads);
                if r == 0 {
                    launch!(
                        gpu,
                        round_kernel,
                        heavy(threads),
                        bases,
                        sorted_idx,
                        offsets,
                        &args.0,
                        &args.1,
                        &args.2,
                        &args.3,
                        &args.4,
                        &args.5,
                        &mut dst
                    )?;
                } else {
                    launch!(
                        gpu,
                        round_kernel,
                        heavy(threads),
                        src,
                        sorted_idx,
                        offsets,
                        &args.0,
                        &args.1,
                        &args.2,
                        &args.3,
                        &args.4,
                        &args.5,
                        &mut dst
                    )?;
                }
            }
            let nb = b_hi - b_lo;
            let mut chunk_offsets = last_offsets.slice_mut(..nb as usize + 1);
            launch!(
                gpu,
                "msm_round_offsets",
                LaunchConfig::for_num_elems(nb + 1),
                offsets,
                &s,
                &e,
                &b_lo,
                &b_hi,
                &rounds,
                &mut chunk_offsets
            )?;
            let list = lists[((rounds + 1) % 2) as usize].slice(..chunk.list_len(rounds) as usize);
            let first = b_lo as usize..b_lo as usize + 1;
            if k > 0 {
                stream.memcpy_dtod(&buckets.slice(first.clone()), &mut carried).during("keeping a bucket")?;
            }
            accumulation.run(
                gpu,
                &list,
                None,
                &last_offsets.slice(..nb as usize + 1),
                nb,
                &mut buckets.slice_mut(b_lo as usize..b_hi as usize),
            )?;
            if k > 0 {
                let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
                let mut bucket = buckets.slice_mut(first);
                launch!(gpu, "msm_add_bucket", one, &mut bucket, &carried)?;
            }
        }
        Ok(())
    }

    /// The MSM of `n` > 0 terms over device views laid out as `layout` says.
    fn run_views<C: MsmCurve>(
        &self,
        bases: &CudaView<C::AffineRaw>,
        scalars: &CudaView<FrRaw>,
        n: usize,
        layout: Layout,
    ) -> Result<C::Projective, GpuError> {
        let gpu = &*self.gpu;
        let stream = gpu.stream();
        if n >= 1 << 31 {
            return Err(GpuError::Invalid("an MSM takes fewer than 2^31 points".into()));
        }
        let plan = Plan::new(n, layout, gpu.info().multiprocessors);
        let Plan { c, windows, sets, shared, stride, .. } = plan;
        let nbuckets = plan.buckets() as usize;
        let n32 = n as u32;
        // Kernels over points carry the curve's suffix; the others serve both.
        let curve_kernel = |name: &str| format!("{name}{}", C::KERNEL_SUFFIX);

        // 1. digits and bucket sizes
        let count = windows as u64 * n as u64;
        let mut keys = unsafe { stream.alloc::<u32>(count as usize) }.during("allocating digit keys")?;
        let mut counts = gpu.zeros::<u32>(nbuckets)?;
        launch!(
            gpu,
            "msm_digits",
            LaunchConfig::for_num_elems(n32),
            scalars,
            &n32,
            &c,
            &windows,
            &shared,
            &mut keys,
            &mut counts
        )?;
        // 2. counting sort by bucket
        let mut offsets = gpu.zeros::<u32>(nbuckets + 1)?;
        let nb32 = nbuckets as u32;
        let tiles = nb32.div_ceil(SCAN_TILE);
        let mut tile_sums = gpu.zeros::<u32>(tiles as usize + 1)?;
        let mut tile_offsets = gpu.zeros::<u32>(tiles as usize + 1)?;
        let scan_cfg = |blocks: u32| LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (SCAN_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(gpu, "scan_tile_sums", scan_cfg(tiles), &counts, &nb32, &mut tile_sums)?;
        launch!(gpu, "scan_exclusive", scan_cfg(1), &tile_sums, &mut tile_offsets, &tiles)?;
        launch!(gpu, "scan_tiles", scan_cfg(tiles), &counts, &nb32, &tile_offsets, &mut offsets)?;
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
            launch!(
                gpu,
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
            )?;
        }
        drop((keys, cursor, counts));
        // 3-4. bucket sums: G1's large MSMs first halve each bucket's list in
        // affine pair rounds; then equal segments per thread
        let mut buckets = gpu.zeros::<C::XyzzRaw>(nbuckets)?;
        let mut accumulation = Accumulation::<C>::new(gpu, &plan)?;
        if C::PAIR_ROUNDS && self.pairs.apply_to(count) {
            self.pair_rounds(bases, &sorted_idx, &offsets, &mut buckets, &mut accumulation)?;
        } else {
            accumulation.run(
                gpu,
                bases,
                Some(&sorted_idx),
                &offsets.slice(..),
                nb32,
                &mut buckets.slice_mut(..),
            )?;
        }
        drop((sorted_idx, offsets, accumulation));
        // 5. Σ (b+1)·B_b per bucket set, in chunks
        let chunks = plan.chunks;
        let mut sums = gpu.zeros::<C::XyzzRaw>((sets * chunks) as usize)?;
        launch!(
            gpu,
            curve_kernel("msm_bucket_reduce"),
            heavy(sets * chunks),
            &buckets,
            &c,
            &sets,
            &chunks,
            &mut sums
        )?;
        drop(buckets);
        // 6. the chunk sums of each set added as trees, 128 at a time
        for (m, groups) in plan.sum_levels() {
            let mut out = gpu.zeros::<C::XyzzRaw>((sets * groups) as usize)?;
            let cfg = LaunchConfig {
                grid_dim: (sets * groups, 1, 1),
                block_dim: (HEAVY_BLOCK, 1, 1),
                shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
            };
            launch!(gpu, curve_kernel("msm_sum_groups"), cfg, &sums, &m, &HEAVY_BLOCK, &groups, &mut out)?;
            sums = out;
        }
        let window_out = sums;
        let sums = stream.clone_dtoh(&window_out).during("copying window sums")?;
        gpu.synchronize()?;
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

/// The XYZZ accumulation's scratch, for one list or for each chunk's in turn.
struct Accumulation<C: MsmCurve> {
    threads: u32,
    fixup_long_blocks: u32,
    part_key: CudaSlice<u32>,
    part_val: CudaSlice<C::XyzzRaw>,
    long_starts: CudaSlice<u32>,
    long_count: CudaSlice<u32>,
}

/// Stands for no sorted list: msm_accumulate then reads point i at position i.
const NO_SORTED_LIST: u64 = 0;

impl<C: MsmCurve> Accumulation<C> {
    fn new(gpu: &Gpu, plan: &Plan) -> Result<Self, GpuError> {
        let threads = plan.accumulate_threads;
        Ok(Self {
            threads,
            fixup_long_blocks: plan.fixup_long_blocks,
            part_key: gpu.zeros::<u32>(2 * threads as usize)?,
            part_val: gpu.zeros::<C::XyzzRaw>(2 * threads as usize)?,
            long_starts: gpu.zeros::<u32>(threads as usize)?,
            long_count: gpu.zeros::<u32>(1)?,
        })
    }

    /// Adds into `buckets` the points of each bucket's run of `offsets`
    /// (`nbuckets` + 1 of them): the bases the sorted list names, or with
    /// no sorted list the points themselves, in order.
    fn run(
        &mut self,
        gpu: &Gpu,
        points: &CudaView<C::AffineRaw>,
        sorted_idx: Option<&CudaSlice<u32>>,
        offsets: &CudaView<u32>,
        nbuckets: u32,
        buckets: &mut CudaViewMut<C::XyzzRaw>,
    ) -> Result<(), GpuError> {
        let stream = gpu.stream();
        let threads = self.threads;
        let name = format!("msm_accumulate{}", C::KERNEL_SUFFIX);
        let f = gpu.function(&name)?;
        let mut b = stream.launch_builder(&f);
        b.arg(points);
        match sorted_idx {
            Some(list) => b.arg(list),
            None => b.arg(&NO_SORTED_LIST),
        };
        b.arg(offsets)
            .arg(&nbuckets)
            .arg(&threads)
            .arg(&mut *buckets)
            .arg(&mut self.part_key)
            .arg(&mut self.part_val);
        // SAFETY: argument types and order match the kernel's signature.
        unsafe { b.launch(heavy(threads)) }.during(format!("launching {name}"))?;
        // Crossing buckets: a thread each, then a block each for those with many partials.
        let slots = 2 * threads;
        stream.memset_zeros(&mut self.long_count).during("clearing the long-bucket count")?;
        launch!(
            gpu,
            format!("msm_fixup{}", C::KERNEL_SUFFIX),
            heavy(slots),
            &self.part_key,
            &self.part_val,
            &slots,
            &mut *buckets,
            &mut self.long_starts,
            &mut self.long_count
        )?;
        let long_cfg = LaunchConfig {
            grid_dim: (self.fixup_long_blocks, 1, 1),
            block_dim: (HEAVY_BLOCK, 1, 1),
            shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
        };
        launch!(
            gpu,
            format!("msm_fixup_long{}", C::KERNEL_SUFFIX),
            long_cfg,
            &self.part_key,
            &self.part_val,
            &slots,
            &self.long_starts,
            &self.long_count,
            &mut *buckets
        )
    }
}

/// A chunk of the sorted list, positions [s, e), and the buckets whose runs
/// it holds (part of), [b_lo, b_hi).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    s: u32,
    e: u32,
    b_lo: u32,
    b_hi: u32,
}

impl Chunk {
    /// Length of round r's list (r ≥ 1; round 0's is the chunk).
    fn list_len(&self, r: u32) -> u64 {
        list_len((self.e - self.s) as u64, r, (self.b_hi - self.b_lo) as u64)
    }
}

/// The sorted list cut into chunks of `chunk` entries, from the bucket
/// offsets (`offsets[b]` the start of bucket b's run; the last the total).
fn chunk_ranges(offsets: &[u32], chunk: u32) -> Vec<Chunk> {
    let total = offsets.last().copied().unwrap_or(0);
    (0..total)
        .step_by(chunk.max(1) as usize)
        .map(|s| {
            let e = total.min(s.saturating_add(chunk.max(1)));
            Chunk {
                s,
                e,
                b_lo: (offsets.partition_point(|&o| o <= s) - 1) as u32,
                b_hi: offsets.partition_point(|&o| o < e) as u32,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_on_an_h200() {
        let sms = 132;
        let plain = Plan::new(1 << 24, Layout::Plain, sms);
        assert_eq!((plain.c, plain.windows, plain.sets, plain.shared, plain.stride), (16, 16, 16, 0, 0));
        assert_eq!((plain.buckets(), plain.accumulate_threads, plain.chunks), (1 << 19, 132 * 128 * 4, 2048));
        assert_eq!(plain.scatter_passes().collect::<Vec<_>>(), [(0, 1 << 19)]);
        assert_eq!(plain.sum_levels().collect::<Vec<_>>(), [(2048, 16), (16, 1)]);

        let shifted = Plan::new(1 << 24, Layout::Shifted { c: 22, stride: 1 << 24 }, sms);
        assert_eq!((shifted.windows, shifted.sets, shifted.shared, shifted.buckets()), (12, 1, 1, 1 << 21));
        assert_eq!(shifted.chunks, 132 * 3 * 128, "one full wave of the reduction");
        assert_eq!(shifted.scatter_passes().collect::<Vec<_>>(), [(0, 1 << 20), (1 << 20, 1 << 21)]);
        assert_eq!(shifted.sum_levels().collect::<Vec<_>>(), [(50688, 396), (396, 4), (4, 1)]);
        assert_eq!(shifted.fixup_long_blocks, 2 * 132);

        let big = Plan::new(1 << 26, Layout::Shifted { c: 24, stride: 1 << 26 }, sms);
        assert_eq!((big.windows, big.scatter_passes().count()), (11, 8));

        // one term: 4-bit windows, one bucket per chunk, nothing left to sum
        let one = Plan::new(1, Layout::Plain, sms);
        assert_eq!((one.c, one.windows, one.buckets(), one.chunks), (4, 64, 64 * 8, 1));
        assert_eq!(one.sum_levels().count(), 0);
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
            let copies = 256u32.div_ceil(c);
            assert!(copies <= 32, "SHIFT_MAX_COPIES in msm.cu: 2^{log} takes {copies}");
            assert!((len as u64) * (copies as u64) < 1 << 31, "2^{log}: indices with the sign bit");
        }
    }

    #[test]
    fn chunks_name_the_buckets_they_cut() {
        // buckets of 3, 0, 7 and 2 entries
        let offsets = [0, 3, 3, 10, 12];
        let chunk = |s, e, b_lo, b_hi| Chunk { s, e, b_lo, b_hi };
        assert_eq!(chunk_ranges(&offsets, 5), [chunk(0, 5, 0, 3), chunk(5, 10, 2, 3), chunk(10, 12, 3, 4)]);
        assert_eq!(chunk_ranges(&offsets, 100), [chunk(0, 12, 0, 4)]);
        assert_eq!(chunk_ranges(&[0, 0, 0], 100), []);
        assert_eq!(chunk(0, 5, 0, 3).list_len(1), 2 + 3);
    }

    /// The pair rounds' layout as `msm_pair_round` indexes it, modelled with
    /// sums of integers: every output slot is written once, and after each
    /// round every bucket's slots add up to what its entries in the chunk did.
    #[test]
    fn pair_rounds_keep_every_buckets_sum() {
        fn start(offsets: &[u32], c: &Chunk, b: u32, r: u32) -> u32 {
            let p = offsets[b as usize].clamp(c.s, c.e) - c.s;
            if r == 0 {
                p
            } else {
                (p >> r) + (b - c.b_lo)
            }
        }
        let counts = [1u32, 0, 2, 3, 0, 0, 7, 1, 16, 5, 0, 9];
        let offsets: Vec<u32> = std::iter::once(0)
            .chain(counts.iter().scan(0, |acc, c| {
                *acc += c;
                Some(*acc)
            }))
            .collect();
        for chunk_len in [1, 2, 3, 7, 11, 44, 100] {
            for c in chunk_ranges(&offsets, chunk_len) {
                // an entry's value is its position + 1; 0 is infinity
                let mut list: Vec<u64> = (c.s..c.e).map(|i| i as u64 + 1).collect();
                let bucket_sum = |list: &[u64], b: u32, r: u32| -> u64 {
                    list[start(&offsets, &c, b, r) as usize..start(&offsets, &c, b + 1, r) as usize]
                        .iter()
                        .sum()
                };
                let want: Vec<u64> = (c.b_lo..c.b_hi).map(|b| bucket_sum(&list, b, 0)).collect();
                for r in 0..5 {
                    let len = if r == 0 { (c.e - c.s) as u64 } else { c.list_len(r) };
                    assert_eq!(list.len() as u64, len);
                    let mut out = vec![None; c.list_len(r + 1) as usize];
                    for b in c.b_lo..c.b_hi {
                        let (in_lo, in_hi) = (start(&offsets, &c, b, r), start(&offsets, &c, b + 1, r));
                        for o in start(&offsets, &c, b, r + 1)..start(&offsets, &c, b + 1, r + 1) {
                            let i = in_lo + 2 * (o - start(&offsets, &c, b, r + 1));
                            let v = (i..in_hi.min(i + 2)).map(|i| list[i as usize]).sum::<u64>();
                            assert!(out[o as usize].replace(v).is_none(), "slot {o} written twice");
                        }
                        // no point of the bucket is left behind
                        let written = start(&offsets, &c, b + 1, r + 1) - start(&offsets, &c, b, r + 1);
                        assert!(2 * written >= in_hi - in_lo, "round {r}, bucket {b}: {written} slots");
                    }
                    list = out.into_iter().map(|v| v.expect("every slot written")).collect();
                    let got: Vec<u64> = (c.b_lo..c.b_hi).map(|b| bucket_sum(&list, b, r + 1)).collect();
                    assert_eq!(got, want, "chunk {c:?}, after round {r}");
                }
            }
        }
    }

    #[test]
    fn pair_scratch_is_bounded_by_the_chunk() {
        let pairs = PairRounds::default();
        assert_eq!(pairs.scratch_bytes(1 << 16), 0, "too small for the rounds");
        assert_eq!(PairRounds::OFF.scratch_bytes(1 << 27), 0);
        let most = ((1u64 << 26) + (1 << 25) + 2 * MAX_BUCKETS) * 96;
        assert_eq!(pairs.scratch_bytes(1 << 24), most);
        assert_eq!(pairs.scratch_bytes(1 << 27), most);
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
