//! NTT over Fr on device-resident buffers.
//!
//! Forward transforms taking natural order return bit-reversed order (DIF);
//! those taking bit-reversed order return natural order (DIT). Chaining them
//! (as [`Ntt::quotient`] does) avoids every bit-reversal pass. Where natural
//! order is wanted on both sides, [`Ntt::forward_natural`] and
//! [`Ntt::inverse_natural`] fold the reversal into the last pass, at the cost
//! of a second buffer of the transform's size kept per size.

use std::collections::HashMap;
use std::sync::Arc;

use blstrs::Scalar;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use ff::{Field, PrimeField};

use crate::device::{CopyLane, Gpu};
use crate::error::{During, GpuError};
use crate::field::{DeviceField, FrRaw};
use crate::locked::PageLocked;

/// Largest transform: 2^27 elements (4 GiB), twiddles included, fits an H200 many times over.
pub const MAX_LOG_N: u32 = 27;
/// Stages per shared-memory pass, elements per block, threads per block
/// (each thread works on four elements at a time, two stages in registers).
const MAX_PASS_STAGES: u32 = 10;
const BLOCK_ELEMENTS_LOG: u32 = 10;
const MAX_THREADS: u32 = 256;
/// Tiles of the bit reversal are 2^4 × 2^4 elements (BR_LOG in `cuda/ntt.cu`).
const BIT_REVERSE_TILE_LOG: u32 = 4;
const LO_BITS: u32 = 10;

/// Index order of a buffer's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Natural,
    BitReversed,
}

impl Order {
    fn flip(self) -> Self {
        match self {
            Order::Natural => Order::BitReversed,
            Order::BitReversed => Order::Natural,
        }
    }
}

/// A device buffer of 2^k Fr elements.
pub struct FrBuffer {
    data: CudaSlice<FrRaw>,
    log_n: u32,
}

impl FrBuffer {
    /// Uploads `v`, whose length must be a power of two up to 2^27.
    pub fn upload(gpu: &Gpu, v: &[Scalar]) -> Result<Self, GpuError> {
        let log_n = log2_exact(v.len())?;
        Ok(Self { data: gpu.upload(v)?, log_n })
    }

    /// Uploads `v` zero-padded to 2^log_n elements.
    pub fn upload_padded(gpu: &Gpu, v: &[Scalar], log_n: u32) -> Result<Self, GpuError> {
        if v.len() > 1 << log_n || log_n > MAX_LOG_N {
            return Err(GpuError::Invalid(format!("{} elements do not fit 2^{log_n}", v.len())));
        }
        let mut data = gpu.zeros::<FrRaw>(1 << log_n)?;
        let raw = crate::field::as_raw(v);
        gpu.stream().memcpy_htod(raw, &mut data.slice_mut(..v.len())).during("copying to the device")?;
        Ok(Self { data, log_n })
    }

    /// As [`FrBuffer::upload_padded`], on a copy stream ([`CopyLane::upload`]):
    /// the copy overlaps kernels already queued, and the transforms launched
    /// on the buffer afterwards wait for it.
    pub fn upload_padded_async(lane: &CopyLane, v: &[Scalar], log_n: u32) -> Result<Self, GpuError> {
        Self::upload_padded_locked(lane, &PageLocked::pageable(v), log_n)
    }

    /// As [`FrBuffer::upload_padded_async`], out of `v` page-locked where
    /// it is ([`CopyLane::upload_locked`]): complete when this returns.
    pub fn upload_padded_locked<V: AsRef<[Scalar]>>(
        lane: &CopyLane,
        v: &PageLocked<V>,
        log_n: u32,
    ) -> Result<Self, GpuError> {
        let len = v.data().as_ref().len();
        if len > 1 << log_n || log_n > MAX_LOG_N {
            return Err(GpuError::Invalid(format!("{len} elements do not fit 2^{log_n}")));
        }
        let mut data = lane.stream().alloc_zeros::<FrRaw>(1 << log_n).during("allocating device memory")?;
        if len > 0 {
            lane.upload_locked_into(v, &mut data.slice_mut(..len))?;
        }
        Ok(Self { data, log_n })
    }

    /// A buffer already on the device, of 2^log_n elements.
    pub(crate) fn from_device(data: CudaSlice<FrRaw>, log_n: u32) -> Self {
        debug_assert_eq!(data.len(), 1 << log_n);
        Self { data, log_n }
    }

    pub fn download(&self, gpu: &Gpu) -> Result<Vec<Scalar>, GpuError> {
        gpu.download::<Scalar>(&self.data)
    }

    pub fn len(&self) -> usize {
        1 << self.log_n
    }

    /// Never: a buffer holds at least one (2^0) element.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn raw(&self) -> &CudaSlice<FrRaw> {
        &self.data
    }

    /// A device-side copy.
    pub fn try_clone(&self, gpu: &Gpu) -> Result<Self, GpuError> {
        Ok(Self {
            data: gpu.stream().clone_dtod(&self.data).during("copying on the device")?,
            log_n: self.log_n,
        })
    }
}

fn log2_exact(n: usize) -> Result<u32, GpuError> {
    if !n.is_power_of_two() || n.trailing_zeros() > MAX_LOG_N {
        return Err(GpuError::Invalid(format!(
            "NTT length {n} is not a power of two in 2^0..=2^{MAX_LOG_N}"
        )));
    }
    Ok(n.trailing_zeros())
}

/// One shared-memory pass: `k` stages whose smallest half-size is 2^log_hlo,
/// with 2^log_r groups per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    log_hlo: u32,
    k: u32,
    log_r: u32,
}

impl Pass {
    fn elements(&self) -> u32 {
        1 << (self.log_r + self.k)
    }

    fn launch_config(&self, log_n: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((1u64 << log_n) as u32 / self.elements(), 1, 1),
            block_dim: ((self.elements() / 4).clamp(1, MAX_THREADS), 1, 1),
            shared_mem_bytes: self.shared_bytes(),
        }
    }

    /// A DIF transform's last pass (h_lo = 1) when it writes bit-reversed: its
    /// block takes 2^log_r groups whose reversed indices are consecutive, so
    /// that it writes runs of that many elements.
    fn reversed_out(self, log_n: u32) -> Pass {
        debug_assert_eq!(self.log_hlo, 0);
        Pass { log_r: (log_n - self.k).min(BLOCK_ELEMENTS_LOG.saturating_sub(self.k)), ..self }
    }

    /// The block's elements, then its stages' twiddles: 2^log_r per stage j, times 2^j.
    fn shared_bytes(&self) -> u32 {
        (2 * self.elements() - (1 << self.log_r)) * std::mem::size_of::<FrRaw>() as u32
    }
}

/// Shared memory of the largest pass (2^10 elements; `plans_cover_every_stage_once` checks every plan).
const MAX_PASS_SHARED: u32 = 2 * (1 << BLOCK_ELEMENTS_LOG) * std::mem::size_of::<FrRaw>() as u32;

/// Passes of a DIF transform (largest half-sizes first); a DIT transform runs
/// them in reverse. Stages are split as evenly as possible.
fn plan(log_n: u32) -> Vec<Pass> {
    if log_n == 0 {
        return Vec::new();
    }
    let count = log_n.div_ceil(MAX_PASS_STAGES);
    let mut passes = Vec::new();
    let mut top = log_n; // stages with log half-size < top remain
    for i in 0..count {
        let k = (log_n - passes.iter().map(|p: &Pass| p.k).sum::<u32>()).div_ceil(count - i);
        let log_hlo = top - k;
        let log_r = log_hlo.min(BLOCK_ELEMENTS_LOG.saturating_sub(k));
        passes.push(Pass { log_hlo, k, log_r });
        top = log_hlo;
    }
    passes
}

/// Per-size device tables.
struct Tables {
    /// ω^e for e < n/2.
    twiddles: CudaSlice<FrRaw>,
    /// Coset scalings: (lo, hi) power tables keyed by what they multiply by.
    powers: HashMap<Scaling, (CudaSlice<FrRaw>, CudaSlice<FrRaw>)>,
    /// The other half of a natural-order transform's double buffer, once one ran.
    spare: Option<CudaSlice<FrRaw>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scaling {
    /// g^i: coefficients → coset.
    Coset,
    /// g^i / n: an unscaled inverse NTT's output → coset.
    CosetOverN,
    /// g^−i / n: inverse on the coset.
    InverseCosetOverN,
    /// 1 / n
    OverN,
    /// ω₂ₙ^i / n: an unscaled inverse NTT's output → the odd 2n-th roots.
    OddCosetOverN,
}

/// The NTT engine of one device: kernels and cached per-size tables.
pub struct Ntt {
    gpu: Arc<Gpu>,
    root: TwoAdicRoot,
    tables: HashMap<u32, Tables>,
}

impl Ntt {
    /// An engine on bellperson's roots of unity.
    pub fn new(gpu: Arc<Gpu>) -> Self {
        Self::with_root(gpu, TwoAdicRoot::Seven)
    }

    /// An engine whose domains are built on `root`.
    pub fn with_root(gpu: Arc<Gpu>, root: TwoAdicRoot) -> Self {
        Self { gpu, root, tables: HashMap::new() }
    }

    /// Device bytes of the tables this engine keeps for transforms of
    /// 2^log_n (the twiddles and the coset powers): made by the first such
    /// transform, counted as used by the device's free memory from then on,
    /// and read by every later one. A natural-order transform's second
    /// buffer is not a table: only those transforms reuse it.
    pub fn kept_bytes(&self, log_n: u32) -> u64 {
        let bytes = |s: &CudaSlice<FrRaw>| (s.len() * std::mem::size_of::<FrRaw>()) as u64;
        self.tables.get(&log_n).map_or(0, |t| {
            bytes(&t.twiddles) + t.powers.values().map(|(lo, hi)| bytes(lo) + bytes(hi)).sum::<u64>()
        })
    }

    /// Builds the tables of size 2^log_n now, so that timings exclude them.
    pub fn prepare(&mut self, log_n: u32) -> Result<(), GpuError> {
        self.tables(log_n).map(|_| ())
    }

    fn tables(&mut self, log_n: u32) -> Result<&mut Tables, GpuError> {
        if !self.tables.contains_key(&log_n) {
            let half = 1usize << log_n.saturating_sub(1);
            let omega = self.root.of_order(log_n);
            let twiddles = self.fill_powers(half, Scalar::ONE, omega)?;
            self.tables.insert(log_n, Tables { twiddles, powers: HashMap::new(), spare: None });
        }
        Ok(self.tables.get_mut(&log_n).unwrap())
    }

    /// [c·x^i for i < len], as lo/hi tables expanded on the device.
    fn fill_powers(&self, len: usize, c: Scalar, x: Scalar) -> Result<CudaSlice<FrRaw>, GpuError> {
        let (lo, hi) = self.power_tables(len, c, x)?;
        let out = self.gpu.zeros::<FrRaw>(len)?;
        let f = self.gpu.function("fill_powers")?;
        let mut out = out;
        let (n, lo_bits) = (len as u32, LO_BITS.min(len.trailing_zeros()));
        let mut b = self.gpu.stream().launch_builder(&f);
        b.arg(&mut out).arg(&n).arg(&lo).arg(&hi).arg(&lo_bits);
        unsafe { b.launch(LaunchConfig::for_num_elems(n)) }.map(drop).during("launching fill_powers")?;
        Ok(out)
    }

    /// lo[j] = x^j (j < 2^LO_BITS), hi[k] = c·x^(k·2^LO_BITS), uploaded.
    fn power_tables(
        &self,
        len: usize,
        c: Scalar,
        x: Scalar,
    ) -> Result<(CudaSlice<FrRaw>, CudaSlice<FrRaw>), GpuError> {
        let lo_bits = LO_BITS.min(len.trailing_zeros());
        let lo_len = 1usize << lo_bits;
        let hi_len = (len >> lo_bits).max(1);
        let mut lo = Vec::with_capacity(lo_len);
        let mut p = Scalar::ONE;
        for _ in 0..lo_len {
            lo.push(p);
            p *= x;
        }
        let step = p; // x^(2^lo_bits)
        let mut hi = Vec::with_capacity(hi_len);
        let mut q = c;
        for _ in 0..hi_len {
            hi.push(q);
            q *= step;
        }
        Ok((self.gpu.upload(&lo)?, self.gpu.upload(&hi)?))
    }

    /// Makes the power tables of `scaling` for 2^log_n, kept from then on.
    fn make_powers(&mut self, log_n: u32, scaling: Scaling) -> Result<(), GpuError> {
        if self.tables(log_n)?.powers.contains_key(&scaling) {
            return Ok(());
        }
        let n = 1usize << log_n;
        let g = Scalar::MULTIPLICATIVE_GENERATOR;
        let n_inv = Scalar::from(n as u64).invert().unwrap();
        let (c, x) = match scaling {
            Scaling::Coset => (Scalar::ONE, g),
            Scaling::CosetOverN => (n_inv, g),
            Scaling::InverseCosetOverN => (n_inv, g.invert().unwrap()),
            Scaling::OverN => (n_inv, Scalar::ONE),
            Scaling::OddCosetOverN => (n_inv, self.root.of_order(log_n + 1)),
        };
        let t = self.power_tables(n, c, x)?;
        self.tables(log_n)?.powers.insert(scaling, t);
        Ok(())
    }

    /// Whether every table `chain` reads at 2^log_n is made
    /// ([`Ntt::prepare_chain`]).
    pub fn chain_ready(&self, chain: HChain, log_n: u32) -> bool {
        self.tables.get(&log_n).is_some_and(|t| chain.scalings().iter().all(|s| t.powers.contains_key(s)))
    }

    /// Makes every table `chain` reads at 2^log_n now (the twiddles and its
    /// coset powers), all kept from then on. A caller that hands the
    /// allocator's pool back first ([`Gpu::memory_reclaimed`]) gets them in
    /// fresh blocks of the pool; made mid-chain instead, a small table is
    /// carved out of a vector the chain has freed, and the pool cannot hand
    /// that vector's block back while the table lives.
    pub fn prepare_chain(&mut self, chain: HChain, log_n: u32) -> Result<(), GpuError> {
        for &scaling in chain.scalings() {
            self.make_powers(log_n, scaling)?;
        }
        Ok(())
    }

    fn scale(&mut self, buf: &mut FrBuffer, scaling: Scaling, order: Order) -> Result<(), GpuError> {
        let log_n = buf.log_n;
        let n = 1usize << log_n;
        self.make_powers(log_n, scaling)?;
        let f = self.gpu.function("scale_powers")?;
        let tables = &self.tables[&log_n];
        let (lo, hi) = &tables.powers[&scaling];
        let lo_bits = LO_BITS.min(log_n);
        let bitrev = (order == Order::BitReversed) as u32;
        let mut b = self.gpu.stream().launch_builder(&f);
        b.arg(&mut buf.data).arg(&log_n).arg(lo).arg(hi).arg(&lo_bits).arg(&bitrev);
        unsafe { b.launch(LaunchConfig::for_num_elems(n as u32)) }.map(drop).during("launching scale_powers")
    }

    /// A pass kernel, allowed the shared memory of the largest pass (elements
    /// and staged twiddles together exceed the 48 KiB a launch gets by default).
    fn pass_function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        let f = self.gpu.function(name)?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            MAX_PASS_SHARED as i32,
        )
        .during("raising a pass kernel's shared memory")?;
        Ok(f)
    }

    /// The unscaled transform: DIF from natural order, DIT from bit-reversed.
    fn transform(&mut self, buf: &mut FrBuffer, input: Order, inverse: bool) -> Result<Order, GpuError> {
        let mut passes = plan(buf.log_n);
        let dit = input == Order::BitReversed;
        if dit {
            passes.reverse();
        }
        self.run_passes(buf, &passes, dit, inverse)?;
        Ok(input.flip())
    }

    fn run_passes(
        &mut self,
        buf: &mut FrBuffer,
        passes: &[Pass],
        dit: bool,
        inverse: bool,
    ) -> Result<(), GpuError> {
        let name = match (dit, inverse) {
            (false, false) => "ntt_pass_dif",
            (false, true) => "ntt_pass_dif_inverse",
            (true, false) => "ntt_pass_dit",
            (true, true) => "ntt_pass_dit_inverse",
        };
        let f = self.pass_function(name)?;
        self.tables(buf.log_n)?;
        let tw = &self.tables[&buf.log_n].twiddles;
        for p in passes {
            let mut b = self.gpu.stream().launch_builder(&f);
            b.arg(&mut buf.data).arg(tw).arg(&buf.log_n).arg(&p.log_hlo).arg(&p.k).arg(&p.log_r);
            unsafe { b.launch(p.launch_config(buf.log_n)) }.map(drop).during("launching ntt_pass")?;
        }
        Ok(())
    }

    /// The unscaled DIF transform from natural order to natural order: its
    /// last pass writes bit-reversed into a second buffer, which becomes
    /// `buf`'s storage; `buf`'s old storage is kept for the next call of this
    /// size.
    fn transform_natural(&mut self, buf: &mut FrBuffer, inverse: bool) -> Result<(), GpuError> {
        let log_n = buf.log_n;
        let mut passes = plan(log_n);
        let Some(last) = passes.pop() else { return Ok(()) }; // a single element
        self.run_passes(buf, &passes, false, inverse)?;
        let last = last.reversed_out(log_n);
        let f = self.pass_function(if inverse {
            "ntt_last_pass_reversed_inverse"
        } else {
            "ntt_last_pass_reversed"
        })?;
        let mut out = match self.tables(log_n)?.spare.take() {
            Some(spare) => spare,
            None => self.gpu.zeros::<FrRaw>(1 << log_n)?,
        };
        let tw = &self.tables[&log_n].twiddles;
        let mut b = self.gpu.stream().launch_builder(&f);
        b.arg(&buf.data).arg(&mut out).arg(tw).arg(&log_n).arg(&last.k).arg(&last.log_r);
        unsafe { b.launch(last.launch_config(log_n)) }
            .map(drop)
            .during("launching ntt_last_pass_reversed")?;
        std::mem::swap(&mut buf.data, &mut out);
        self.tables(log_n)?.spare = Some(out);
        Ok(())
    }

    /// Coefficients → evaluations at ω^i, both in natural order, with no
    /// separate bit-reversal pass. Holds a second buffer of `buf`'s size
    /// from the first call of each size on.
    pub fn forward_natural(&mut self, buf: &mut FrBuffer) -> Result<(), GpuError> {
        self.transform_natural(buf, false)
    }

    /// Evaluations at ω^i → coefficients, both in natural order (see [`Ntt::forward_natural`]).
    pub fn inverse_natural(&mut self, buf: &mut FrBuffer) -> Result<(), GpuError> {
        self.transform_natural(buf, true)?;
        self.scale(buf, Scaling::OverN, Order::Natural)
    }

    /// Coefficients → evaluations at ω^i. Returns the output order.
    pub fn forward(&mut self, buf: &mut FrBuffer, input: Order) -> Result<Order, GpuError> {
        self.transform(buf, input, false)
    }

    /// Evaluations at ω^i → coefficients (scaled by 1/n).
    pub fn inverse(&mut self, buf: &mut FrBuffer, input: Order) -> Result<Order, GpuError> {
        let out = self.transform(buf, input, true)?;
        self.scale(buf, Scaling::OverN, out)?;
        Ok(out)
    }

    /// Coefficients → evaluations at g·ω^i.
    pub fn coset_forward(&mut self, buf: &mut FrBuffer, input: Order) -> Result<Order, GpuError> {
        self.scale(buf, Scaling::Coset, input)?;
        self.transform(buf, input, false)
    }

    /// Evaluations at g·ω^i → coefficients.
    pub fn coset_inverse(&mut self, buf: &mut FrBuffer, input: Order) -> Result<Order, GpuError> {
        let out = self.transform(buf, input, true)?;
        self.scale(buf, Scaling::InverseCosetOverN, out)?;
        Ok(out)
    }

    /// Permutes into the other order.
    pub fn bit_reverse(&self, buf: &mut FrBuffer) -> Result<(), GpuError> {
        // Tiles once there are two whole tile sides.
        let tile = 2 * BIT_REVERSE_TILE_LOG;
        let (name, cfg) = if buf.log_n >= tile {
            let blocks = 1u32 << (buf.log_n - tile);
            let threads = 1u32 << tile;
            (
                "bit_reverse_tiled",
                LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 },
            )
        } else {
            ("bit_reverse", LaunchConfig::for_num_elems(1 << buf.log_n))
        };
        let f = self.gpu.function(name)?;
        let mut b = self.gpu.stream().launch_builder(&f);
        b.arg(&mut buf.data).arg(&buf.log_n);
        unsafe { b.launch(cfg) }.map(drop).during("launching bit reversal")
    }

    /// Groth16's H: given A, B, C as evaluations on the domain (natural order),
    /// the coefficients of (A·B − C)/Z, **in bit-reversed order** (the H bases
    /// of a key can be permuted once to match). a is overwritten with the
    /// result; b and c are consumed.
    pub fn quotient(&mut self, a: &mut FrBuffer, b: FrBuffer, c: FrBuffer) -> Result<Order, GpuError> {
        self.h_chain(HChain::Quotient, a, b, c)
    }

    /// snarkjs's H scalars: given A, B, C as evaluations on the domain
    /// (natural order), A·B − C at the odd 2n-th roots ω₂ₙ·ω^i, **in natural
    /// order** (the order of a zkey's H bases). a is overwritten with the
    /// result; b and c are consumed.
    pub fn odd_coset_evaluations(
        &mut self,
        a: &mut FrBuffer,
        b: FrBuffer,
        c: FrBuffer,
    ) -> Result<Order, GpuError> {
        self.h_chain(HChain::OddCoset, a, b, c)
    }

    fn h_chain(
        &mut self,
        chain: HChain,
        a: &mut FrBuffer,
        mut b: FrBuffer,
        mut c: FrBuffer,
    ) -> Result<Order, GpuError> {
        for v in [&mut *a, &mut b, &mut c] {
            self.to_coset(chain, v)?;
        }
        self.h_from_coset(chain, a, b, c)
    }

    /// The first half of `chain` for one of A, B, C: evaluations on the
    /// domain (natural order) → on the chain's coset (natural order), in
    /// place: an inverse transform to bit-reversed coefficients (unscaled),
    /// the coset's powers and 1/n, a forward transform. One vector at a
    /// time, so that a caller can copy the next to the device meanwhile.
    pub fn to_coset(&mut self, chain: HChain, v: &mut FrBuffer) -> Result<(), GpuError> {
        let scaling = match chain {
            HChain::Quotient => Scaling::CosetOverN,
            HChain::OddCoset => Scaling::OddCosetOverN,
        };
        self.transform(v, Order::Natural, true)?;
        self.scale(v, scaling, Order::BitReversed)?;
        self.transform(v, Order::BitReversed, false)?;
        Ok(())
    }

    /// The second half of `chain`, from A, B, C on its coset ([`Ntt::to_coset`]
    /// each): H's scalars in a, in the order returned. b and c are consumed.
    pub fn h_from_coset(
        &mut self,
        chain: HChain,
        a: &mut FrBuffer,
        b: FrBuffer,
        c: FrBuffer,
    ) -> Result<Order, GpuError> {
        same_length(a, &b)?;
        same_length(a, &c)?;
        self.pointwise(a, &b, &c, quotient_scale(chain, a.log_n))?;
        drop((b, c));
        self.h_from_evaluations(chain, a)
    }

    /// [`Ntt::h_from_coset`] holding two of A, B, C on the device at a time
    /// rather than three: a·b first and b freed, then C made by `c` (on the
    /// chain's coset: [`Ntt::to_coset`]) and subtracted. One more pass over
    /// a; for a device that holds two vectors of the domain beside the rest
    /// of a proof, not three.
    pub fn h_from_coset_two_at_a_time(
        &mut self,
        chain: HChain,
        a: &mut FrBuffer,
        b: FrBuffer,
        c: impl FnOnce(&mut Self) -> Result<FrBuffer, GpuError>,
    ) -> Result<Order, GpuError> {
        same_length(a, &b)?;
        self.elementwise("fr_mul_assign", a, &b, None)?;
        drop(b);
        let c = c(self)?;
        same_length(a, &c)?;
        self.elementwise("fr_sub_scale", a, &c, Some(quotient_scale(chain, a.log_n)))?;
        drop(c);
        self.h_from_evaluations(chain, a)
    }

    /// From a = (A·B − C)·k on the chain's coset to H's scalars.
    fn h_from_evaluations(&mut self, chain: HChain, a: &mut FrBuffer) -> Result<Order, GpuError> {
        match chain {
            HChain::Quotient => {
                self.transform(a, Order::Natural, true)?;
                self.scale(a, Scaling::InverseCosetOverN, Order::BitReversed)?;
                Ok(Order::BitReversed)
            }
            HChain::OddCoset => Ok(Order::Natural),
        }
    }

    /// a ← a·b (`k` none) or a ← (a − b)·k, elementwise, by the kernel `name`.
    fn elementwise(
        &self,
        name: &str,
        a: &mut FrBuffer,
        b: &FrBuffer,
        k: Option<Scalar>,
    ) -> Result<(), GpuError> {
        let n32 = 1u32 << a.log_n;
        let k = k.map(|k| k.to_raw());
        let f = self.gpu.function(name)?;
        let mut lb = self.gpu.stream().launch_builder(&f);
        lb.arg(&mut a.data).arg(&b.data);
        if let Some(k) = &k {
            lb.arg(k);
        }
        lb.arg(&n32);
        unsafe { lb.launch(LaunchConfig::for_num_elems(n32)) }.map(drop).during(format!("launching {name}"))
    }

    /// a ← (a·b − c)·k, elementwise.
    fn pointwise(&self, a: &mut FrBuffer, b: &FrBuffer, c: &FrBuffer, k: Scalar) -> Result<(), GpuError> {
        let n32 = 1u32 << a.log_n;
        let k = k.to_raw();
        let f = self.gpu.function("quotient_pointwise")?;
        let mut lb = self.gpu.stream().launch_builder(&f);
        lb.arg(&mut a.data).arg(&b.data).arg(&c.data).arg(&k).arg(&n32);
        unsafe { lb.launch(LaunchConfig::for_num_elems(n32)) }
            .map(drop)
            .during("launching quotient_pointwise")
    }
}

/// Which H a Groth16 prover wants from its A, B, C evaluations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HChain {
    /// bellperson's: the coefficients of (A·B − C)/Z, by way of the coset g·ω^i
    /// ([`Ntt::quotient`]).
    Quotient,
    /// snarkjs's: A·B − C at the odd 2n-th roots ([`Ntt::odd_coset_evaluations`]).
    OddCoset,
}

impl HChain {
    /// The coset powers the chain scales by ([`Ntt::to_coset`] and
    /// [`Ntt::h_from_coset`]'s last step).
    fn scalings(self) -> &'static [Scaling] {
        match self {
            HChain::Quotient => &[Scaling::CosetOverN, Scaling::InverseCosetOverN],
            HChain::OddCoset => &[Scaling::OddCosetOverN],
        }
    }
}

/// What the pointwise step of `chain` multiplies A·B − C by on a coset of
/// 2^log_n: 1/Z(g) for bellperson's quotient (Z is constant on the coset),
/// 1 for snarkjs's evaluations.
fn quotient_scale(chain: HChain, log_n: u32) -> Scalar {
    match chain {
        HChain::Quotient => {
            let g = Scalar::MULTIPLICATIVE_GENERATOR;
            (g.pow_vartime([1u64 << log_n]) - Scalar::ONE).invert().unwrap()
        }
        HChain::OddCoset => Scalar::ONE,
    }
}

fn same_length(a: &FrBuffer, b: &FrBuffer) -> Result<(), GpuError> {
    if a.log_n == b.log_n {
        Ok(())
    } else {
        Err(GpuError::Invalid("a, b and c must have the same length".into()))
    }
}

/// Which primitive 2^32-th root of unity of Fr the domains are built on. Fr
/// has many; a prover must use the one its key's setup interpolated with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TwoAdicRoot {
    /// 7^t (t = (r − 1)/2^32): blstrs's `ROOT_OF_UNITY`, used by bellperson
    /// and Filecoin.
    #[default]
    Seven,
    /// 5^t: ffjavascript's (5 is Fr's smallest non-residue), used by snarkjs.
    Five,
}

impl TwoAdicRoot {
    /// The primitive 2^log_n-th root of unity on this root's chain.
    pub fn of_order(self, log_n: u32) -> Scalar {
        assert!(log_n <= Scalar::S, "Fr has no 2^{log_n}-th root of unity");
        let mut omega = match self {
            TwoAdicRoot::Seven => Scalar::ROOT_OF_UNITY,
            TwoAdicRoot::Five => {
                let t = ((Scalar::ZERO - Scalar::ONE).to_repr(), Scalar::S);
                Scalar::from(5u64).pow_vartime(shift_right(t.0, t.1))
            }
        };
        for _ in log_n..Scalar::S {
            omega = omega.square();
        }
        omega
    }
}

/// A little-endian 256-bit integer shifted right by `k` bits, as u64 limbs.
fn shift_right(le: <Scalar as PrimeField>::Repr, k: u32) -> [u64; 4] {
    let mut limbs = [0u64; 4];
    for (l, c) in limbs.iter_mut().zip(le.as_ref().chunks_exact(8)) {
        *l = u64::from_le_bytes(c.try_into().unwrap());
    }
    let (words, bits) = ((k / 64) as usize, k % 64);
    let mut out = [0u64; 4];
    for i in 0..4 - words {
        let lo = limbs[i + words] >> bits;
        let hi = if bits > 0 && i + words + 1 < 4 { limbs[i + words + 1] << (64 - bits) } else { 0 };
        out[i] = lo | hi;
    }
    out
}

/// The primitive 2^log_n-th root of unity of Fr that bellperson uses
/// ([`TwoAdicRoot::Seven`]).
pub fn root_of_unity(log_n: u32) -> Scalar {
    TwoAdicRoot::Seven.of_order(log_n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's launch arithmetic mirrors constants of `cuda/ntt.cu`.
    #[test]
    fn both_roots_are_primitive_and_differ() {
        for root in [TwoAdicRoot::Seven, TwoAdicRoot::Five] {
            let w = root.of_order(Scalar::S);
            assert_eq!(w.pow_vartime([1u64 << 31]), -Scalar::ONE, "{root:?}");
        }
        assert_ne!(TwoAdicRoot::Seven.of_order(4), TwoAdicRoot::Five.of_order(4));
        // ffjavascript's 2^32-th root, as snarkjs prints it (Fr.w[Fr.s]).
        let five = TwoAdicRoot::Five.of_order(Scalar::S);
        let want = "937917089079007706106976984802249742464848817460758522850752807661925904159";
        assert_eq!(five, Scalar::from_str_vartime(want).unwrap());
    }

    #[test]
    fn host_constants_match_the_kernels() {
        let src = crate::compile::kernel_source();
        for needle in [
            format!("#define BR_LOG {BIT_REVERSE_TILE_LOG}u"),
            format!("__launch_bounds__({MAX_THREADS}, 3)"),
        ] {
            assert!(src.contains(&needle), "cuda/ntt.cu no longer has `{needle}`");
        }
    }

    #[test]
    fn plans_cover_every_stage_once() {
        for log_n in 1..=MAX_LOG_N {
            let p = plan(log_n);
            assert_eq!(p.iter().map(|p| p.k).sum::<u32>(), log_n, "log_n={log_n}");
            assert_eq!(p.last().unwrap().log_hlo, 0);
            assert_eq!(p[0].log_hlo + p[0].k, log_n);
            for w in p.windows(2) {
                assert_eq!(w[1].log_hlo + w[1].k, w[0].log_hlo, "contiguous stages");
            }
            for q in &p {
                assert!(q.k <= MAX_PASS_STAGES && q.log_r <= q.log_hlo);
                assert!(q.log_r + q.k <= BLOCK_ELEMENTS_LOG.max(q.k));
                assert!(q.shared_bytes() <= MAX_PASS_SHARED);
            }
            let last = p.last().unwrap().reversed_out(log_n);
            assert!(last.log_r + last.k <= BLOCK_ELEMENTS_LOG.max(last.k) && last.log_r + last.k <= log_n);
            assert!(last.shared_bytes() <= MAX_PASS_SHARED);
            if log_n >= 16 && last.k <= 8 {
                assert!(last.log_r >= 2, "2^{log_n}: runs of at least 4 elements");
            }
        }
    }
}
