//! Multi-scalar multiplication over G1 and G2 on the device (Pippenger,
//! signed digits, counting sort by bucket, equal work per thread; see
//! `cuda/msm.cu`).

use std::marker::PhantomData;
use std::sync::Arc;

use blst::{blst_fp, blst_fp2, blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg, ValidAsZeroBits,
};
use group::Group;

use crate::device::Gpu;
use crate::error::{During, GpuError};
use crate::field::{as_raw, FpRaw, FrRaw};

/// An affine G1 point as the kernels read it (blst's layout; infinity is zeros).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct G1AffineRaw {
    pub x: FpRaw,
    pub y: FpRaw,
}

/// An XYZZ accumulator as the kernels write it.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct G1XyzzRaw {
    pub x: FpRaw,
    pub y: FpRaw,
    pub zz: FpRaw,
    pub zzz: FpRaw,
}

// SAFETY: plain integers in the kernels' layout; any bit pattern is valid.
unsafe impl DeviceRepr for G1AffineRaw {}
unsafe impl ValidAsZeroBits for G1AffineRaw {}
unsafe impl DeviceRepr for G1XyzzRaw {}
unsafe impl ValidAsZeroBits for G1XyzzRaw {}

/// An Fp2 element c0 + c1·u (blst's layout).
pub type Fp2Raw = [FpRaw; 2];

/// An affine G2 point as the kernels read it (blst's layout; infinity is zeros).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct G2AffineRaw {
    pub x: Fp2Raw,
    pub y: Fp2Raw,
}

/// A G2 XYZZ accumulator as the kernels write it.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct G2XyzzRaw {
    pub x: Fp2Raw,
    pub y: Fp2Raw,
    pub zz: Fp2Raw,
    pub zzz: Fp2Raw,
}

// SAFETY: as for G1.
unsafe impl DeviceRepr for G2AffineRaw {}
unsafe impl ValidAsZeroBits for G2AffineRaw {}
unsafe impl DeviceRepr for G2XyzzRaw {}
unsafe impl ValidAsZeroBits for G2XyzzRaw {}

const _: () = assert!(std::mem::size_of::<G2Affine>() == std::mem::size_of::<G2AffineRaw>());
const _: () = assert!(std::mem::size_of::<G2Affine>() == std::mem::size_of::<blst_p2_affine>());
const _: () = assert!(std::mem::size_of::<G2Projective>() == std::mem::size_of::<blst_p2>());
const _: () = assert!(std::mem::size_of::<G1Affine>() == std::mem::size_of::<G1AffineRaw>());
const _: () = assert!(std::mem::size_of::<G1Affine>() == std::mem::size_of::<blst_p1_affine>());
const _: () = assert!(std::mem::size_of::<G1Projective>() == std::mem::size_of::<blst_p1>());

/// Reinterprets blstrs affine points (repr(transparent) over blst's) in the
/// kernels' layout, without a copy.
pub fn points_as_raw(points: &[G1Affine]) -> &[G1AffineRaw] {
    // SAFETY: same size; G1Affine is blst_p1_affine {x, y: blst_fp} = 2 × [u64; 6].
    unsafe { std::slice::from_raw_parts(points.as_ptr().cast(), points.len()) }
}

/// A group the MSM kernels serve: its blstrs types, its device layouts and
/// the suffix of its kernels' names.
pub trait MsmCurve {
    type Affine: Copy;
    type Projective: Group + Copy;
    type AffineRaw: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin;
    type XyzzRaw: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin;
    /// "" for G1, "_g2" for G2 (`MSM_KERNELS` in `cuda/msm.cu`).
    const KERNEL_SUFFIX: &'static str;
    fn as_raw(points: &[Self::Affine]) -> &[Self::AffineRaw];
    fn xyzz_to_projective(p: &Self::XyzzRaw) -> Self::Projective;
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
        points_as_raw(points)
    }
    fn xyzz_to_projective(p: &G1XyzzRaw) -> G1Projective {
        xyzz_to_projective(p)
    }
}

impl MsmCurve for G2 {
    type Affine = G2Affine;
    type Projective = G2Projective;
    type AffineRaw = G2AffineRaw;
    type XyzzRaw = G2XyzzRaw;
    const KERNEL_SUFFIX: &'static str = "_g2";
    fn as_raw(points: &[G2Affine]) -> &[G2AffineRaw] {
        // SAFETY: same size; G2Affine is blst_p2_affine {x, y: blst_fp2} = 2 × 2 × [u64; 6].
        unsafe { std::slice::from_raw_parts(points.as_ptr().cast(), points.len()) }
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
            std::mem::transmute::<blst_p2, G2Projective>(out)
        }
    }
}

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
    points: CudaSlice<C::AffineRaw>,
    len: usize,
    /// Window width of the shifted copies, if any.
    shift_bits: Option<u32>,
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
        let len = points.len();
        if len == 0 {
            return Self::upload(gpu, points);
        }
        let c = shifted_window_bits(len);
        let copies = 256u32.div_ceil(c);
        if len as u64 * copies as u64 >= 1 << 31 {
            return Err(GpuError::Invalid(format!(
                "{len} bases with {copies} shifted copies exceed 2^31 points"
            )));
        }
        let stream = gpu.stream();
        let plain = stream.clone_htod(points_as_raw(points)).during("copying bases to the device")?;
        let mut table = unsafe { stream.alloc::<G1AffineRaw>(len * copies as usize) }
            .during("allocating the shifted bases")?;
        let f = gpu.function("msm_shift_bases")?;
        let mut b = stream.launch_builder(&f);
        let n32 = len as u32;
        b.arg(&plain).arg(&n32).arg(&c).arg(&copies).arg(&mut table);
        // SAFETY: argument types and order match the kernel's signature.
        unsafe { b.launch(heavy(n32)) }.during("launching msm_shift_bases")?;
        gpu.synchronize()?;
        Ok(Self { points: table, len, shift_bits: Some(c), curve: PhantomData })
    }
}

/// Window width for shifted bases of `len` points: one set of 2^(c−1)
/// buckets serves every window, so c can be wider than without shifts.
pub fn shifted_window_bits(len: usize) -> u32 {
    let log = usize::BITS - len.max(1).leading_zeros();
    log.saturating_sub(3).clamp(8, 24)
}

/// How one MSM finds its bases.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// One base per term; each window has its own buckets.
    Plain,
    /// Copies of `stride` points, copy w shifted by c·w bits: one bucket set.
    Shifted { c: u32, stride: u32 },
}

/// Blocks of msm_accumulate resident per SM: its `__launch_bounds__` caps
/// registers at 128 so that four fit (three at 166 registers before).
const ACCUMULATE_BLOCKS_PER_SM: u32 = 4;

/// Blocks of msm_bucket_reduce resident per SM (its launch bounds). The
/// reduction runs one full wave of threads over all bucket sets: fewer
/// leave SMs idle (16 × 128 threads took 28 ms at 2^22, by ncu), more make a
/// second, partial wave, each thread paying its chunk's fixed cost (scaling
/// by the chunk's first index) again.
const REDUCE_BLOCKS_PER_SM: u32 = 3;

/// The MSM engine of one device (G1 and G2).
pub struct Msm {
    gpu: Arc<Gpu>,
}

/// Bases kept in pinned host memory, in chunks, for MSMs whose bases do not
/// stay on the device: each chunk is copied while the previous one is
/// being summed.
pub struct PinnedBases {
    chunks: Vec<PinnedHostSlice<G1AffineRaw>>,
    chunk: usize,
    len: usize,
}

impl PinnedBases {
    pub fn new(gpu: &Gpu, points: &[G1Affine], chunk: usize) -> Result<Self, GpuError> {
        let chunk = chunk.max(1);
        let mut chunks = Vec::new();
        for c in points.chunks(chunk) {
            let mut p = gpu.pinned::<G1AffineRaw>(c.len())?;
            p.as_mut_slice().during("mapping pinned memory")?.copy_from_slice(points_as_raw(c));
            chunks.push(p);
        }
        Ok(Self { chunks, chunk, len: points.len() })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
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
pub fn window_bits(n: usize) -> u32 {
    let log = usize::BITS - n.max(1).leading_zeros();
    log.saturating_sub(3).clamp(4, 16)
}

impl Msm {
    pub fn new(gpu: Arc<Gpu>) -> Self {
        Self { gpu }
    }

    /// Σ scalars[i]·bases[i] over the first `scalars.len()` bases.
    pub fn run<C: MsmCurve>(&self, bases: &Bases<C>, scalars: &[Scalar]) -> Result<C::Projective, GpuError> {
        let gpu = &*self.gpu;
        let n = scalars.len();
        if n > bases.len() {
            return Err(GpuError::Invalid(format!("{n} scalars for {} bases", bases.len())));
        }
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

    /// Σ scalars[i]·bases[i] with the bases streamed from pinned host memory:
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
        let (c, shared, stride) = match layout {
            Layout::Plain => (window_bits(n), 0u32, 0u32),
            Layout::Shifted { c, stride } => (c, 1, stride),
        };
        let windows = 256u32.div_ceil(c);
        // bucket sets: one per window, or one for all
        let sets = if shared == 1 { 1 } else { windows };
        let buckets_per_set = 1u32 << (c - 1);
        let nbuckets = (sets * buckets_per_set) as usize;
        let n32 = n as u32;
        // Kernels over points carry the curve's suffix; the others serve both.
        let curve_kernel = |name: &str| format!("{name}{}", C::KERNEL_SUFFIX);
        macro_rules! launch {
            ($name:expr, $cfg:expr, $($arg:expr),+) => {{
                let name: &str = &$name;
                let f = gpu.function(name)?;
                let mut b = stream.launch_builder(&f);
                $(b.arg($arg);)+
                // SAFETY: argument types and order match the kernel's signature.
                unsafe { b.launch($cfg) }.map(drop).during(format!("launching {name}"))
            }};
        }

        // 1. digits and bucket sizes
        let count = windows as u64 * n as u64;
        let mut keys = unsafe { stream.alloc::<u32>(count as usize) }.during("allocating digit keys")?;
        let mut counts = gpu.zeros::<u32>(nbuckets)?;
        launch!(
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
        launch!("scan_tile_sums", scan_cfg(tiles), &counts, &nb32, &mut tile_sums)?;
        launch!("scan_exclusive", scan_cfg(1), &tile_sums, &mut tile_offsets, &tiles)?;
        launch!("scan_tiles", scan_cfg(tiles), &counts, &nb32, &tile_offsets, &mut offsets)?;
        drop((tile_sums, tile_offsets));
        let mut cursor = stream.clone_dtod(&offsets).during("copying offsets")?;
        let mut sorted_idx =
            unsafe { stream.alloc::<u32>(count as usize) }.during("allocating the sorted list")?;
        let scatter_cfg = LaunchConfig {
            grid_dim: (count.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        for lo in (0..nb32).step_by(SCATTER_PASS_BUCKETS as usize) {
            let hi = nb32.min(lo + SCATTER_PASS_BUCKETS);
            launch!(
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
        // 3. bucket sums, equal segments per thread
        // As many threads as fit the GPU at once (msm_accumulate's launch bounds).
        let threads = (gpu.info().multiprocessors * HEAVY_BLOCK * ACCUMULATE_BLOCKS_PER_SM).max(1);
        let mut buckets = gpu.zeros::<C::XyzzRaw>(nbuckets)?;
        let mut part_key = gpu.zeros::<u32>(2 * threads as usize)?;
        let mut part_val = gpu.zeros::<C::XyzzRaw>(2 * threads as usize)?;
        launch!(
            curve_kernel("msm_accumulate"),
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
        let slots = 2 * threads;
        let fixup_cfg = LaunchConfig {
            grid_dim: (slots, 1, 1),
            block_dim: (HEAVY_BLOCK, 1, 1),
            shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
        };
        launch!(curve_kernel("msm_fixup"), fixup_cfg, &part_key, &part_val, &slots, &mut buckets)?;
        drop((sorted_idx, offsets, part_key, part_val));
        // 4. Σ (b+1)·B_b per bucket set, in chunks
        let wave = gpu.info().multiprocessors * REDUCE_BLOCKS_PER_SM * HEAVY_BLOCK;
        let chunks = (wave / sets).clamp(1, (buckets_per_set / 16).max(1));
        let mut sums = gpu.zeros::<C::XyzzRaw>((sets * chunks) as usize)?;
        launch!(
            curve_kernel("msm_bucket_reduce"),
            heavy(sets * chunks),
            &buckets,
            &c,
            &sets,
            &chunks,
            &mut sums
        )?;
        drop(buckets);
        // 5. the chunk sums of each set added as trees, 128 at a time
        let mut m = chunks;
        while m > 1 {
            let groups = m.div_ceil(HEAVY_BLOCK);
            let mut out = gpu.zeros::<C::XyzzRaw>((sets * groups) as usize)?;
            let cfg = LaunchConfig {
                grid_dim: (sets * groups, 1, 1),
                block_dim: (HEAVY_BLOCK, 1, 1),
                shared_mem_bytes: HEAVY_BLOCK * std::mem::size_of::<C::XyzzRaw>() as u32,
            };
            launch!(curve_kernel("msm_sum_groups"), cfg, &sums, &m, &HEAVY_BLOCK, &groups, &mut out)?;
            sums = out;
            m = groups;
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

/// (X, Y, ZZ, ZZZ) → the point (X/ZZ, Y/ZZZ).
pub fn xyzz_to_projective(p: &G1XyzzRaw) -> G1Projective {
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
        std::mem::transmute::<blst_p1, G1Projective>(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifted_tables_fit_the_kernels_limits() {
        assert_eq!(shifted_window_bits(1 << 24), 22);
        assert_eq!(shifted_window_bits(1 << 26), 24);
        for log in 0..=27 {
            let len = 1usize << log;
            let c = shifted_window_bits(len);
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
