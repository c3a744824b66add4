//! The CUDA backend: H by the NTT chain (no bit-reversal pass) and the four G1
//! MSMs on the GPU, with the bases of several proving keys resident on the
//! device at once (least recently used evicted when device memory runs short).
//! B's G2 MSM (`prove_finish`) runs on the device too, its bases resident
//! beside the G1 ones, unless `G2Placement::Cpu` keeps it on the host.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use blstrs::{G1Affine, G1Projective, G2Projective, Scalar};
use group::Group;
use provd_kernels::msm::shifted_copies;
use provd_kernels::ntt::TwoAdicRoot;
use provd_kernels::{
    select_by_density, CopyLane, CudaSlice, DeviceMatrix, FrBuffer, FrRaw, G1Bases, G2Bases, Gpu, GpuError,
    HChain, Msm, Ntt, Order, Timer, Unsatisfied,
};

use super::{Backend, BasesLayout, CudaOptions, G2Placement, InFlight, ProductsPlacement};
use crate::groth16::msm::filter;
use crate::groth16::prover::{split, Blinding, Finished, G1Parts, PendingProof, StepTime};
use crate::groth16::synthesis::{Density, Evaluations, Products};
use crate::groth16::{Matrices, ProveError, ProvingKey, Reduction, Synthesized};

// The device's sparse products read columns as the host's matrices encode them.
const _: () = assert!(crate::groth16::sparse::AUX == provd_kernels::AUX_COLUMN);

/// Device bytes kept free beside the resident keys for one proof's working
/// buffers, per domain element: a/b/c and the aux assignment during the H
/// chain (4 × 32 B), then the aux assignment, a query's subset of it and an
/// MSM's digits and sorted lists (2 × 32 B + 128 B).
const WORKING_BYTES_PER_ELEMENT: u64 = 8 * 32;
/// And a fixed part for the MSM engine's bucket tables.
const WORKING_BYTES_FIXED: u64 = 512 << 20;
/// Bytes of one G1 and one G2 base on the device.
const G1_BASE_BYTES: u64 = std::mem::size_of::<provd_kernels::msm::G1AffineRaw>() as u64;
const G2_BASE_BYTES: u64 = std::mem::size_of::<provd_kernels::msm::G2AffineRaw>() as u64;

/// Proves with one CUDA device.
pub struct CudaBackend {
    name: String,
    gpu: Arc<Gpu>,
    msm: Msm,
    options: CudaOptions,
    state: Mutex<State>,
    /// Keys (fingerprints) whose circuit matrices did not fit on the device
    /// the last time they were tried; apart from `state`, so that synthesis
    /// can ask without waiting for the device.
    no_room: Mutex<std::collections::HashSet<[u8; 32]>>,
}

struct State {
    /// NTT engines by the roots of unity their keys were set up on.
    ntts: HashMap<TwoAdicRoot, Ntt>,
    /// CUDA events around each piece of device work, for the device's busy time.
    timer: Timer,
    /// Resident keys, least recently used first.
    keys: Vec<DeviceKey>,
    /// Uploads per key (by fingerprint), evicted keys included.
    uploads: HashMap<[u8; 32], u64>,
    evictions: u64,
}

/// Which keys a backend holds on its device, and how often it loaded them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyResidency {
    /// Every key uploaded at least once; `device_bytes` is 0 once evicted.
    pub keys: Vec<ResidentKey>,
    /// Keys evicted to make room for another.
    pub evictions: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResidentKey {
    /// [`ProvingKey::fingerprint`].
    pub fingerprint: [u8; 32],
    pub device_bytes: u64,
    pub uploads: u64,
}

/// The order in which the device's NTT chain leaves H's scalars, and so the
/// order of the key's H bases on the device.
fn h_order(reduction: Reduction) -> Order {
    match reduction {
        Reduction::Bellperson => Order::BitReversed,
        Reduction::Snarkjs => Order::Natural,
    }
}

/// A proving key's G1 bases on the device. H's bases are stored in the
/// order of [`h_order`].
struct DeviceKey {
    fingerprint: [u8; 32],
    /// The layout its large G1 queries got.
    layout: BasesLayout,
    h: G1Bases,
    l: G1Bases,
    a_inputs: G1Bases,
    a_aux: G1Bases,
    b_inputs: G1Bases,
    b_aux: G1Bases,
    /// B's G2 bases (inputs, aux), when the G2 MSM runs on the device.
    b_g2: Option<(G2Bases, G2Bases)>,
    /// The circuit's A, B and C, for a, b and c on the device.
    products: Option<DeviceProducts>,
}

/// A key's circuit matrices on the device: uploaded with the first witness
/// that leaves its a, b and c as products, and evicted with the key.
struct DeviceProducts {
    /// The matrices uploaded (the witness's own must be used).
    source: Arc<Matrices>,
    /// A, B and C.
    abc: [DeviceMatrix; 3],
}

impl DeviceProducts {
    fn bytes(&self) -> u64 {
        self.abc.iter().map(|m| m.bytes() as u64).sum()
    }
}

/// Device bytes of `matrices` uploaded, before uploading them.
fn matrices_bytes(matrices: &Matrices) -> u64 {
    let (abc, _, _) = matrices.parts();
    abc.iter().map(|m| DeviceMatrix::bytes_for(m.rows(), m.compressed_rows().1.len()) as u64).sum()
}

/// Uploads A, B and C.
fn upload_matrices(gpu: &Gpu, matrices: &Matrices) -> Result<[DeviceMatrix; 3], GpuError> {
    let ([a, b, c], _, _) = matrices.parts();
    let one = |m: &crate::groth16::sparse::SparseMatrix| {
        let (rows, cols, coeffs) = m.compressed_rows();
        let rows: Vec<u64> = rows.iter().map(|&r| r as u64).collect();
        DeviceMatrix::upload(gpu, &rows, cols, coeffs)
    };
    Ok([one(a)?, one(b)?, one(c)?])
}

impl DeviceKey {
    /// Device bytes the key's bases take laid out as `layout`, before
    /// uploading them; `None` where that layout cannot hold them.
    fn bytes_needed(key: &ProvingKey, b_inputs: usize, g2: G2Placement, layout: BasesLayout) -> Option<u64> {
        let inputs = key.vk.ic.len();
        let large = [
            key.domain_size(),
            key.l.len(),
            key.a.len().saturating_sub(inputs),
            key.b_g1.len().saturating_sub(b_inputs),
        ];
        let mut g1 = (inputs + b_inputs) as u64 * G1_BASE_BYTES;
        for len in large {
            let copies = match layout {
                BasesLayout::Plain => 1,
                BasesLayout::Shifted if len == 0 => 1,
                BasesLayout::Shifted => shifted_copies(len)?,
            };
            g1 += len as u64 * copies as u64 * G1_BASE_BYTES;
        }
        let g2 = if g2 == G2Placement::Gpu { key.b_g2.len() as u64 * G2_BASE_BYTES } else { 0 };
        Some(g1 + g2)
    }

    fn upload(
        gpu: &Gpu,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<Self, GpuError> {
        let large = |points: &[G1Affine]| match layout {
            BasesLayout::Shifted => G1Bases::upload_shifted(gpu, points),
            BasesLayout::Plain => G1Bases::upload(gpu, points),
        };
        let n = key.domain_size();
        let log_n = n.trailing_zeros();
        // position p holds the base of scalar i (bitrev(p) when bit-reversed);
        // a scalar with no base (bellperson's coefficient n−1, always zero)
        // gets the identity. Written a chunk at a time: a reordered copy of
        // them all would be n × 96 host bytes that no budget counts.
        let h_bases = |start: usize, chunk: &mut [G1Affine]| {
            for (p, slot) in (start..).zip(chunk) {
                let i = match h_order(key.reduction) {
                    Order::BitReversed if log_n > 0 => p.reverse_bits() >> (usize::BITS - log_n),
                    _ => p,
                };
                *slot = key.h.get(i).copied().unwrap_or_default();
            }
        };
        let h = match layout {
            BasesLayout::Shifted => G1Bases::upload_shifted_from(gpu, n, h_bases)?,
            BasesLayout::Plain => G1Bases::upload_from(gpu, n, h_bases)?,
        };
        let inputs = key.vk.ic.len();
        Ok(Self {
            fingerprint: key.fingerprint(),
            layout,
            h,
            l: large(&key.l)?,
            a_inputs: G1Bases::upload(gpu, &key.a[..inputs])?,
            a_aux: large(&key.a[inputs..])?,
            b_inputs: G1Bases::upload(gpu, &key.b_g1[..b_inputs])?,
            b_aux: large(&key.b_g1[b_inputs..])?,
            b_g2: match g2 {
                G2Placement::Gpu => Some((
                    G2Bases::upload(gpu, &key.b_g2[..b_inputs])?,
                    G2Bases::upload(gpu, &key.b_g2[b_inputs..])?,
                )),
                G2Placement::Cpu => None,
            },
            products: None,
        })
    }

    fn bytes(&self) -> u64 {
        let g1: u64 = [&self.h, &self.l, &self.a_inputs, &self.a_aux, &self.b_inputs, &self.b_aux]
            .iter()
            .map(|b| b.bytes() as u64)
            .sum();
        g1 + self.b_g2.as_ref().map_or(0, |(i, a)| (i.bytes() + a.bytes()) as u64)
            + self.products.as_ref().map_or(0, DeviceProducts::bytes)
    }
}

impl State {
    fn resident_bytes(&self) -> u64 {
        self.keys.iter().map(DeviceKey::bytes).sum()
    }

    fn evict_oldest(&mut self, device: &str, why: &str) {
        let old = self.keys.remove(0);
        self.evictions += 1;
        tracing::info!(device, mib = old.bytes() >> 20, why, "proving key bases evicted from the device");
    }
}

impl CudaBackend {
    /// Opens device `ordinal`; kernels are cached under `data_dir/kernels`.
    pub fn open(ordinal: usize, data_dir: &Path, options: CudaOptions) -> Result<Self, GpuError> {
        let gpu = Arc::new(Gpu::open(ordinal, &data_dir.join("kernels"))?);
        Ok(Self {
            name: format!("cuda:{ordinal}"),
            msm: Msm::new(gpu.clone()),
            options,
            state: Mutex::new(State {
                ntts: HashMap::new(),
                timer: gpu.timer()?,
                keys: Vec::new(),
                uploads: HashMap::new(),
                evictions: 0,
            }),
            no_room: Mutex::default(),
            gpu,
        })
    }

    pub fn gpu(&self) -> Arc<Gpu> {
        self.gpu.clone()
    }

    /// Makes `key`'s bases resident (the most recently used), evicting the
    /// least recently used keys while the limit or the device's free memory
    /// leaves no room; returns its index in `state.keys`.
    fn make_resident(
        &self,
        state: &mut State,
        key: &ProvingKey,
        b_inputs: usize,
    ) -> Result<usize, ProveError> {
        let fingerprint = key.fingerprint();
        if let Some(i) = state.keys.iter().position(|k| k.fingerprint == fingerprint) {
            let k = state.keys.remove(i);
            state.keys.push(k);
            return Ok(state.keys.len() - 1);
        }
        let g2 = self.options.b_g2_msm;
        let need = DeviceKey::bytes_needed(key, b_inputs, g2, BasesLayout::Plain)
            .expect("plain bases always have a layout");
        if let Some(dk) = self.upload_shifted_if_room(state, key, b_inputs)? {
            return Ok(self.now_resident(state, dk));
        }
        if let Some(limit) = self.options.key_memory_limit {
            if need > limit {
                return Err(ProveError::Backend {
                    backend: "cuda",
                    message: format!(
                        "this key's bases need {need} device bytes, more than gpu.key_memory_limit ({limit})"
                    ),
                });
            }
            while !state.keys.is_empty() && state.resident_bytes() + need > limit {
                state.evict_oldest(&self.name, "gpu.key_memory_limit");
            }
        }
        let working = self.working_bytes(key);
        loop {
            let free = self.gpu.memory().map(|(free, _)| free as u64).map_err(backend_error)?;
            if state.keys.is_empty() || free >= need + working {
                break;
            }
            state.evict_oldest(&self.name, "device memory short");
        }
        let dk = loop {
            match DeviceKey::upload(&self.gpu, key, b_inputs, g2, BasesLayout::Plain) {
                Ok(dk) => break dk,
                Err(e) if e.is_out_of_memory() && !state.keys.is_empty() => {
                    state.evict_oldest(&self.name, "out of device memory while uploading");
                }
                Err(e) => return Err(backend_error(e)),
            }
        };
        Ok(self.now_resident(state, dk))
    }

    /// Device bytes for each partition in flight to hold its working buffers.
    fn working_bytes(&self, key: &ProvingKey) -> u64 {
        (key.domain_size() as u64 * WORKING_BYTES_PER_ELEMENT + WORKING_BYTES_FIXED)
            * self.options.partitions_in_flight.count() as u64
    }

    /// Makes `products`' matrices resident beside the key in `slot`, if they
    /// are not yet and fit beside the resident keys (within the key memory
    /// limit) with the working buffers to spare; no key is evicted for them.
    /// Whether they are resident. If not, the key is listed in `no_room`
    /// until it is uploaded again, and its witnesses' a, b, c are computed on
    /// the host (in synthesis: [`Backend::products`]).
    fn make_products_resident(
        &self,
        state: &mut State,
        slot: usize,
        key: &ProvingKey,
        products: &Products,
    ) -> Result<bool, ProveError> {
        if let Some(resident) = &state.keys[slot].products {
            if Arc::ptr_eq(&resident.source, &products.matrices) {
                return Ok(true);
            }
            // Another circuit served with the same key (its matrices are the
            // witness's own, which the proof must use): they replace these.
            state.keys[slot].products = None;
        }
        let need = matrices_bytes(&products.matrices);
        let uploaded = if self.has_room(state, key, need)? {
            uploaded_unless_out_of_memory(upload_matrices(&self.gpu, &products.matrices))?
        } else {
            None
        };
        let Some(abc) = uploaded else {
            tracing::warn!(device = %self.name, mib = need >> 20,
                "no room for the circuit's matrices on the device: a, b, c computed on the host");
            self.no_room.lock().unwrap_or_else(|e| e.into_inner()).insert(key.fingerprint());
            return Ok(false);
        };
        tracing::info!(device = %self.name, mib = need >> 20,
            "circuit matrices resident on the device: a, b, c computed there");
        state.keys[slot].products = Some(DeviceProducts { source: products.matrices.clone(), abc });
        Ok(true)
    }

    /// Whether `need` more device bytes fit beside the resident keys: within
    /// the key memory limit, and with the working buffers of `key`'s
    /// partitions in flight to spare.
    fn has_room(&self, state: &State, key: &ProvingKey, need: u64) -> Result<bool, ProveError> {
        if self.options.key_memory_limit.is_some_and(|limit| state.resident_bytes() + need > limit) {
            return Ok(false);
        }
        let free = self.gpu.memory().map(|(free, _)| free as u64).map_err(backend_error)?;
        Ok(free >= need + self.working_bytes(key))
    }

    /// The key with shifted G1 bases, if `gpu.bases` asks for them and they
    /// fit beside the keys already resident ([`CudaBackend::has_room`]); no
    /// key is evicted for them.
    fn upload_shifted_if_room(
        &self,
        state: &State,
        key: &ProvingKey,
        b_inputs: usize,
    ) -> Result<Option<DeviceKey>, ProveError> {
        if self.options.bases != BasesLayout::Shifted {
            return Ok(None);
        }
        let g2 = self.options.b_g2_msm;
        let Some(need) = DeviceKey::bytes_needed(key, b_inputs, g2, BasesLayout::Shifted) else {
            return Ok(None);
        };
        if !self.has_room(state, key, need)? {
            return Ok(None);
        }
        // plain bases where another process took the free memory meanwhile
        uploaded_unless_out_of_memory(DeviceKey::upload(&self.gpu, key, b_inputs, g2, BasesLayout::Shifted))
    }

    /// Counts `dk`'s upload and makes it the most recently used key; its index.
    fn now_resident(&self, state: &mut State, dk: DeviceKey) -> usize {
        *state.uploads.entry(dk.fingerprint).or_default() += 1;
        // the device may have room for its matrices now
        self.no_room.lock().unwrap_or_else(|e| e.into_inner()).remove(&dk.fingerprint);
        tracing::info!(device = %self.name, mib = dk.bytes() >> 20, layout = ?dk.layout,
            resident = state.keys.len() + 1, "proving key bases resident on the device");
        state.keys.push(dk);
        state.keys.len() - 1
    }

    /// H's scalars left on the device, in the order of the key's H bases on
    /// it, and the aux assignment on the device. Vectors still on the host
    /// are copied (on `lane`) while the one before them transforms,
    /// and each host vector is freed once copied; the aux assignment is
    /// copied while the chain runs.
    fn quotient_on_device(
        &self,
        lane: &CopyLane,
        ntts: &mut HashMap<TwoAdicRoot, Ntt>,
        reduction: Reduction,
        log_n: u32,
        vectors: Vectors,
        aux: &[Scalar],
    ) -> Result<(FrBuffer, Option<CudaSlice<FrRaw>>), GpuError> {
        let root = reduction.root();
        let ntt = ntts.entry(root).or_insert_with(|| Ntt::with_root(self.gpu.clone(), root));
        let chain = match reduction {
            Reduction::Bellperson => HChain::Quotient,
            Reduction::Snarkjs => HChain::OddCoset,
        };
        let (abc, copied_aux) = match vectors {
            Vectors::OnHost(abc) => (abc.map(Vector::Host), None),
            Vectors::OnDevice { abc, aux } => (abc.map(Vector::Device), Some(aux)),
        };
        let mut on_coset = Vec::with_capacity(3);
        for v in abc {
            let mut d = v.on_device(lane, log_n)?;
            ntt.to_coset(chain, &mut d)?;
            on_coset.push(d);
        }
        let aux = match copied_aux {
            Some(copied) => copied,
            None => upload_aux(lane, aux)?,
        };
        let [mut a, b, c]: [FrBuffer; 3] = on_coset.try_into().ok().expect("three vectors");
        let order = ntt.h_from_coset(chain, &mut a, b, c)?;
        debug_assert_eq!(order, h_order(reduction));
        Ok((a, aux))
    }

    /// A proof's vectors as `prove_start` finds them when it locks the
    /// device: still on the host with one partition in flight (each copied
    /// while the one before it transforms), or, with two, already copied
    /// (here, before the lock, while the other partition's kernels run).
    /// a, b and c still to compute are left so, with the assignment copied.
    fn copy_ahead(
        &self,
        lane: &CopyLane,
        log_n: u32,
        abc: Evaluations,
        input: &[Scalar],
        aux: &[Scalar],
    ) -> Result<Prepared, GpuError> {
        let abc = match abc {
            Evaluations::Products(products) => {
                let (input, aux) = (lane.upload(input)?, upload_aux(lane, aux)?);
                return Ok(Prepared::Products { products, input, aux });
            }
            Evaluations::Host { a, b, c } => [a, b, c],
        };
        Ok(Prepared::Evaluated(match self.options.partitions_in_flight {
            InFlight::One => Vectors::OnHost(abc),
            InFlight::Two => {
                Vectors::OnDevice { abc: upload_abc(lane, abc, log_n)?, aux: upload_aux(lane, aux)? }
            }
        }))
    }

    /// All five MSMs and H on the device (B's G2 MSM too, unless
    /// `G2Placement::Cpu` leaves it to `prove_finish`). The aux assignment
    /// is copied once, during the H chain (or before, with a, b and c to
    /// compute from it), and the A and B queries' subsets are picked from it
    /// on the device.
    fn start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        let log_n = key.domain_size().trailing_zeros();
        let (abc, asg, a_aux_density) = split(witness);
        // The inputs' subset in B is a handful of scalars: filtered here.
        let b_in = filter(&asg.input, &asg.b_input_density);
        let wall = Instant::now();
        // Declared first, so dropped last: every device buffer of this proof
        // is allocated on the lane and freed on it, never on another proof's.
        let lane = self.gpu.copy_lane().map_err(backend_error)?;
        let prepared = self.copy_ahead(&lane, log_n, abc, &asg.input, &asg.aux).map_err(backend_error)?;
        let copied = (!matches!(prepared, Prepared::Evaluated(Vectors::OnHost(_))))
            .then(|| StepTime::on_host_since("copies (before the device lock)", wall));
        let wall = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let locked = StepTime::on_host_since("wait for device", wall);
        let mut slot = self.make_resident(&mut state, key, asg.b_input_density.ones())?;
        let mut on_host = None;
        let prepared = match prepared {
            Prepared::Products { products, aux, .. }
                if !self.make_products_resident(&mut state, slot, key, &products)? =>
            {
                // No room for the matrices: a, b and c on the host's cores,
                // without holding the device, then the device again; unless
                // the caller released their host memory (the pipeline), which
                // then makes the witness again (`ProveError::NoRoomForProducts`).
                drop(state);
                let wall = Instant::now();
                let abc = Evaluations::Products(products).on_host(&asg.input, &asg.aux)?;
                let abc = upload_abc(&lane, abc, log_n).map_err(backend_error)?;
                on_host = Some(StepTime::on_host_since("products on the host (no room on the device)", wall));
                state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                slot = self.make_resident(&mut state, key, asg.b_input_density.ones())?;
                Prepared::Evaluated(Vectors::OnDevice { abc, aux })
            }
            p => p,
        };
        let State { ntts, keys, timer, .. } = &mut *state;
        let mut clock = StepClock::new(timer);
        clock.steps.extend(copied);
        clock.steps.push(locked);
        clock.steps.extend(on_host);
        let dk = &keys[slot];
        let (msm, gpu) = (&self.msm, &*self.gpu);
        let naux = asg.aux.len();
        // a, b and c still to compute, from the matrices made resident above:
        // their a·b = c check is queued behind them and read once the MSMs
        // are queued too.
        let (vectors, check) = match prepared {
            Prepared::Products { products, input, aux } => {
                let Some(m) = dk.products.as_ref().map(|p| &p.abc) else {
                    return Err(backend_error(GpuError::Invalid(
                        "the circuit's matrices left the device".into(),
                    )));
                };
                let rows = products.matrices.num_constraints();
                let (abc, check) = clock
                    .time("products", || {
                        let a = m[0].product(gpu, &input, aux.as_ref(), log_n)?;
                        let b = m[1].product(gpu, &input, aux.as_ref(), log_n)?;
                        let c = m[2].product(gpu, &input, aux.as_ref(), log_n)?;
                        let check = Unsatisfied::check(gpu, &a, &b, &c, rows)?;
                        Ok(([a, b, c], check))
                    })
                    .map_err(backend_error)?;
                (Vectors::OnDevice { abc, aux }, Some((check, products)))
            }
            Prepared::Evaluated(v) => (v, None),
        };
        let (g1, b_g2) = (|| -> Result<(G1Parts, Option<G2Projective>), GpuError> {
            // a/b/c's host copies are freed as they reach the device
            let (h_scalars, aux) = clock.time("copies + quotient", || {
                self.quotient_on_device(&lane, ntts, key.reduction, log_n, vectors, &asg.aux)
            })?;
            let h = clock.time("msm h", || msm.run_device(&dk.h, h_scalars.raw(), h_scalars.len()))?;
            drop(h_scalars);
            let aux = aux.as_ref();
            // Σ over the aux subset `picked` (the scalars and their count), if any.
            let over = |bases, picked: Option<(&CudaSlice<FrRaw>, usize)>| match picked {
                Some((scalars, n)) => msm.run_device(bases, scalars, n),
                None => Ok(G1Projective::identity()),
            };
            let l = clock.time("msm l", || over(&dk.l, aux.map(|s| (s, naux))))?;
            let a = clock.time("msm a", || {
                let picked = pick(gpu, aux, naux, &a_aux_density)?;
                Ok(msm.run(&dk.a_inputs, &asg.input)?
                    + over(&dk.a_aux, picked.as_ref().map(|(s, n)| (s, *n)))?)
            })?;
            // B's aux subset serves both groups: picked once.
            let (b_g1, b_aux) = clock.time("msm b_g1", || {
                let picked = pick(gpu, aux, naux, &asg.b_aux_density)?;
                let sum =
                    msm.run(&dk.b_inputs, &b_in)? + over(&dk.b_aux, picked.as_ref().map(|(s, n)| (s, *n)))?;
                Ok((sum, picked))
            })?;
            let b_g2 = match &dk.b_g2 {
                Some((g2_inputs, g2_aux)) => Some(clock.time("msm b_g2", || {
                    let mut sum = msm.run(g2_inputs, &b_in)?;
                    if let Some((scalars, n)) = &b_aux {
                        sum += msm.run_device(g2_aux, scalars, *n)?;
                    }
                    Ok(sum)
                })?),
                None => None,
            };
            Ok((G1Parts { h, l, a, b_g1 }, b_g2))
        })()
        .map_err(backend_error)?;
        let unsatisfied = match check {
            Some((check, products)) => check.first(gpu).map_err(backend_error)?.map(|_| products),
            None => None,
        };
        let (device_seconds, steps) = clock.into_parts();
        // Naming the bad constraint re-runs the circuit: not while holding the device.
        drop(state);
        if let Some(products) = unsatisfied {
            return Err(products.unsatisfied());
        }
        Ok(PendingProof { g1, b_g2, assignment: asg, device_seconds, steps })
    }
}

/// A proof's vectors as `copy_ahead` leaves them for the device lock.
enum Prepared {
    /// a, b and c evaluated on the host.
    Evaluated(Vectors),
    /// a, b and c still to compute, the assignment copied.
    Products { products: Products, input: CudaSlice<FrRaw>, aux: Option<CudaSlice<FrRaw>> },
}

/// A proof's a/b/c and aux assignment, on the host or on the device.
enum Vectors {
    OnHost([Vec<Scalar>; 3]),
    OnDevice { abc: [FrBuffer; 3], aux: Option<CudaSlice<FrRaw>> },
}

/// One of a, b, c: on the host, or copied (zero-padded to the domain).
enum Vector {
    Host(Vec<Scalar>),
    Device(FrBuffer),
}

impl Vector {
    /// On the device; a host vector is copied (on `lane`) and then freed.
    fn on_device(self, lane: &CopyLane, log_n: u32) -> Result<FrBuffer, GpuError> {
        match self {
            Vector::Host(v) => FrBuffer::upload_padded_async(lane, &v, log_n),
            Vector::Device(d) => Ok(d),
        }
    }
}

/// a, b and c on the device, each zero-padded to 2^log_n and its host copy
/// freed once copied (on `lane`).
fn upload_abc(lane: &CopyLane, abc: [Vec<Scalar>; 3], log_n: u32) -> Result<[FrBuffer; 3], GpuError> {
    let [a, b, c] = abc;
    let up = |v: Vec<Scalar>| FrBuffer::upload_padded_async(lane, &v, log_n);
    Ok([up(a)?, up(b)?, up(c)?])
}

/// The aux assignment on the device (copied on `lane`); `None` without aux
/// variables.
fn upload_aux(lane: &CopyLane, aux: &[Scalar]) -> Result<Option<CudaSlice<FrRaw>>, GpuError> {
    if aux.is_empty() {
        Ok(None)
    } else {
        lane.upload(aux).map(Some)
    }
}

/// The subset of the aux assignment (on the device) that `density` selects,
/// and its length; `None` without aux variables.
fn pick(
    gpu: &Gpu,
    aux: Option<&CudaSlice<FrRaw>>,
    len: usize,
    density: &Density,
) -> Result<Option<(CudaSlice<FrRaw>, usize)>, GpuError> {
    aux.map(|aux| select_by_density(gpu, aux, len, density.words())).transpose()
}

/// Times each step of a proof: the device's part between two CUDA events on
/// the compute stream (its kernels, and the copies they wait for), the wall
/// time on the host around it.
struct StepClock<'a> {
    timer: &'a Timer,
    steps: Vec<StepTime>,
}

impl<'a> StepClock<'a> {
    fn new(timer: &'a Timer) -> Self {
        Self { timer, steps: Vec::new() }
    }

    fn time<T>(
        &mut self,
        step: &'static str,
        run: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let wall = Instant::now();
        self.timer.start()?;
        let out = run()?;
        let device_ms = self.timer.stop()? as f64;
        self.steps.push(StepTime { step, wall_ms: wall.elapsed().as_secs_f64() * 1e3, device_ms });
        Ok(out)
    }

    /// The device's busy seconds over every step, and the steps.
    fn into_parts(self) -> (Option<f64>, Vec<StepTime>) {
        let ms: f64 = self.steps.iter().map(|s| s.device_ms).sum();
        (Some(ms / 1e3), self.steps)
    }
}

/// An optional upload's result: `None` where the device ran out of memory
/// (free memory that another process took after it was measured).
fn uploaded_unless_out_of_memory<T>(upload: Result<T, GpuError>) -> Result<Option<T>, ProveError> {
    match upload {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_out_of_memory() => Ok(None),
        Err(e) => Err(backend_error(e)),
    }
}

fn backend_error(e: GpuError) -> ProveError {
    ProveError::Backend { backend: "cuda", message: e.to_string() }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        key.check_matches(&witness)?;
        if key.domain_size().trailing_zeros() > provd_kernels::ntt::MAX_LOG_N {
            return Err(ProveError::DomainTooLarge { constraints: witness.num_constraints() });
        }
        self.start(key, witness)
    }

    /// The assembly, and B's G2 MSM on the host's cores first where
    /// `G2Placement::Cpu` left it out of `prove_start`.
    fn prove_finish(
        &self,
        key: &ProvingKey,
        pending: PendingProof,
        blind: Blinding,
    ) -> Result<Finished, ProveError> {
        let step = if pending.b_g2.is_some() { "assemble" } else { "msm b_g2 (host) + assemble" };
        let wall = Instant::now();
        let mut finished = Finished::on_cpu(key, pending, blind);
        finished.steps.push(StepTime::on_host_since(step, wall));
        Ok(finished)
    }

    fn partitions_in_flight(&self) -> InFlight {
        self.options.partitions_in_flight
    }

    /// None beyond the witness while every MSM runs on the device (H, the
    /// filtered scalars and the staging are device or per-device memory);
    /// the CPU prover's where B's G2 MSM runs on the host.
    fn host_working_bytes(&self, key: &ProvingKey) -> u64 {
        match self.options.b_g2_msm {
            G2Placement::Gpu => 0,
            G2Placement::Cpu => super::cpu_working_bytes(key),
        }
    }

    /// `gpu.products`, except for a key whose matrices did not fit on the
    /// device: the host computes its a, b and c, in synthesis.
    fn products(&self, key: &ProvingKey) -> ProductsPlacement {
        let no_room = || self.no_room.lock().unwrap_or_else(|e| e.into_inner()).contains(&key.fingerprint());
        match self.options.products {
            ProductsPlacement::Gpu if no_room() => ProductsPlacement::Cpu,
            placement => placement,
        }
    }

    fn resident_keys(&self) -> KeyResidency {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let keys = state
            .uploads
            .iter()
            .map(|(fp, uploads)| ResidentKey {
                fingerprint: *fp,
                device_bytes: state.keys.iter().find(|k| &k.fingerprint == fp).map_or(0, DeviceKey::bytes),
                uploads: *uploads,
            })
            .collect();
        KeyResidency { keys, evictions: state.evictions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{prove, CpuBackend};
    use crate::circuits::{BenchCircuit, Builtin, Shape};
    use crate::groth16::{domain::Domain, keygen, synthesize, Blinding};
    use ff::Field;
    use rand::SeedableRng;

    /// H's scalars in natural order, as the CPU reference returns them.
    fn quotient(
        gpu: &CudaBackend,
        r: Reduction,
        log_n: u32,
        a: &[Scalar],
        b: &[Scalar],
        c: &[Scalar],
    ) -> Vec<Scalar> {
        let mut state = gpu.state.lock().unwrap();
        let abc = Vectors::OnHost([a, b, c].map(<[Scalar]>::to_vec));
        let lane = gpu.gpu.copy_lane().unwrap();
        let (mut h, _) = gpu.quotient_on_device(&lane, &mut state.ntts, r, log_n, abc, &[]).unwrap();
        if h_order(r) == Order::BitReversed {
            state.ntts[&r.root()].bit_reverse(&mut h).unwrap();
        }
        let mut h = h.download(&gpu.gpu).unwrap();
        h.truncate(r.h_len(1 << log_n));
        h
    }

    fn backend(options: CudaOptions) -> Option<CudaBackend> {
        match CudaBackend::open(0, &std::env::temp_dir().join("provd-test-data"), options) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn gpu_quotient_matches_cpu() {
        let Some(gpu) = backend(CudaOptions::default()) else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for log_n in [1u32, 6, 12, 18, 22] {
            let n = 1usize << log_n;
            // short vectors: zero-padding must match too
            let len = n - n / 3;
            let v = |rng: &mut rand_chacha::ChaCha8Rng| {
                (0..len).map(|_| Scalar::random(&mut *rng)).collect::<Vec<_>>()
            };
            let (a, b, c) = (v(&mut rng), v(&mut rng), v(&mut rng));
            for r in [Reduction::Bellperson, Reduction::Snarkjs] {
                let domain = Domain::on(log_n, r.root());
                let want = r.quotient(&domain, a.clone(), b.clone(), c.clone());
                let got = quotient(&gpu, r, log_n, &a, &b, &c);
                assert_eq!(got, want, "{r:?}, n=2^{log_n}");
            }
        }
    }

    #[test]
    fn gpu_prove_start_matches_cpu_and_proofs_verify() {
        let Some(gpu) = backend(CudaOptions::default()) else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for k in [4, 10, 14, 16] {
            let key = keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap();
            let w = synthesize(BenchCircuit::new(k, 4, Some(3))).unwrap();
            let ours = gpu.prove_start(&key, w.clone()).unwrap();
            let cpu = CpuBackend.prove_start(&key, w).unwrap();
            assert_eq!(ours.g1, cpu.g1, "bench-{k}: G1 parts");
            assert!(ours.device_seconds.is_some_and(|d| d > 0.0));
            // B's G2 MSM ran on the device, in prove_start, and agrees with blst's
            let on_host = crate::groth16::msm::b_g2(&key, &cpu.assignment);
            assert_eq!(ours.b_g2, Some(on_host), "bench-{k}: B in G2");
            let public = ours.assignment.public_inputs().to_vec();
            let blind = Blinding::random(&mut rng);
            let on_cpu = crate::groth16::prover::finish_on_cpu(&key, cpu, blind);
            let finished = gpu.prove_finish(&key, ours, blind).unwrap();
            assert_eq!(finished.proof, on_cpu, "bench-{k}: the CPU's proof for the same blinding");
            assert!(finished.proof.verify(&key.vk, &public), "bench-{k}");
        }
        // every key so far stayed resident: one upload each, no eviction
        let res = gpu.resident_keys();
        assert_eq!(res.keys.len(), 4);
        assert!(res.keys.iter().all(|k| k.uploads == 1 && k.device_bytes > 0), "{res:?}");
        assert_eq!(res.evictions, 0);
    }

    /// Two partitions in flight: two threads prove at once on one backend,
    /// each copying its vectors before it locks the device (while the
    /// other's kernels run); every proof equals the CPU's for its blinding.
    #[test]
    fn gpu_two_partitions_in_flight_prove_what_the_cpu_proves() {
        let options = CudaOptions { partitions_in_flight: InFlight::Two, ..CudaOptions::default() };
        let Some(gpu) = backend(options) else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let dense = Builtin { shape: Shape::Dense, log_size: 14 };
        let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..2u64 {
                let (gpu, key) = (&gpu, &key);
                scope.spawn(move || {
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(thread);
                    for round in 0..4 {
                        let w = synthesize(dense.circuit(Some(10 * thread + round))).unwrap();
                        let ours = gpu.prove_start(key, w.clone()).unwrap();
                        assert!(ours.steps.iter().any(|s| s.step.starts_with("copies (before")));
                        let cpu = CpuBackend.prove_start(key, w).unwrap();
                        assert_eq!(ours.g1, cpu.g1, "thread {thread} round {round}");
                        let public = ours.assignment.public_inputs().to_vec();
                        let blind = Blinding::random(&mut rng);
                        let on_cpu = crate::groth16::prover::finish_on_cpu(key, cpu, blind);
                        let finished = gpu.prove_finish(key, ours, blind).unwrap();
                        assert_eq!(finished.proof, on_cpu, "thread {thread} round {round}");
                        assert!(finished.proof.verify(&key.vk, &public));
                    }
                });
            }
        });
    }

    /// a, b and c computed on the device from the circuit's matrices
    /// (uploaded once, beside the key) prove what the CPU proves from the
    /// same witness, with one and two partitions in flight, bit-heavy and
    /// dense; a witness that breaks a constraint is refused with the
    /// recorder's name for it; where the matrices do not fit (a key memory
    /// limit that holds the key alone), a, b and c are computed on the host,
    /// from then on in synthesis, and the proofs are the same.
    #[test]
    fn gpu_products_on_the_device_prove_what_the_cpu_proves() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let prove_both =
            |gpu: &CudaBackend, key: &ProvingKey, w: Synthesized, rng: &mut rand_chacha::ChaCha8Rng| {
                let ours = gpu.prove_start(key, w.clone()).unwrap();
                let cpu = CpuBackend.prove_start(key, w).unwrap();
                assert_eq!(ours.g1, cpu.g1, "G1 parts");
                let steps: Vec<&str> = ours.steps.iter().map(|s| s.step).collect();
                let public = ours.assignment.public_inputs().to_vec();
                let blind = Blinding::random(rng);
                let on_cpu = crate::groth16::prover::finish_on_cpu(key, cpu, blind);
                let finished = gpu.prove_finish(key, ours, blind).unwrap();
                assert_eq!(finished.proof, on_cpu, "the CPU's proof for the same blinding");
                assert!(finished.proof.verify(&key.vk, &public));
                steps
            };
        let circuits =
            [Builtin { shape: Shape::Bits, log_size: 10 }, Builtin { shape: Shape::Dense, log_size: 12 }];
        let setup: Vec<_> = circuits
            .iter()
            .map(|b| {
                let matrices = Arc::new(Matrices::record(b.circuit(None)).unwrap());
                (*b, keygen::generate_test_key_for(&matrices, &mut rng).unwrap(), matrices)
            })
            .collect();
        for in_flight in [InFlight::One, InFlight::Two] {
            let Some(gpu) =
                backend(CudaOptions { partitions_in_flight: in_flight, ..CudaOptions::default() })
            else {
                return;
            };
            for (b, key, matrices) in &setup {
                assert_eq!(gpu.products(key), ProductsPlacement::Gpu);
                for seed in [1u64, 2] {
                    let w = matrices.assign(b.circuit(Some(seed))).unwrap();
                    assert!(matches!(w.abc, Evaluations::Products(_)));
                    let steps = prove_both(&gpu, key, w, &mut rng);
                    assert!(steps.contains(&"products"), "{b:?} {in_flight:?}: {steps:?}");
                }
            }
            // each key's bytes count its matrices: more than its bases alone
            let res = gpu.resident_keys();
            for (_, key, matrices) in &setup {
                let got = res.keys.iter().find(|k| k.fingerprint == key.fingerprint()).unwrap();
                assert!(got.device_bytes > matrices_bytes(matrices), "{res:?}");
            }
        }
        let Some(gpu) = backend(CudaOptions::default()) else { return };
        let (b, key, matrices) = &setup[0];
        let honest = matrices.assign(b.circuit(Some(3))).unwrap().evaluated().unwrap();
        let mut wrong = honest.public_inputs().to_vec();
        wrong[1] += Scalar::ONE;
        let w = matrices.assign(b.circuit(Some(3)).claiming(wrong)).unwrap();
        let err = gpu.prove_start(key, w).unwrap_err();
        assert!(err.to_string().contains("'out1'"), "named as the recorder names it: {err}");
        assert!(err.is_bad_input(), "{err:?}");

        // a limit that holds the plain bases and no more: the host computes a, b, c
        let plain = CudaOptions {
            bases: BasesLayout::Plain,
            products: ProductsPlacement::Cpu,
            ..CudaOptions::default()
        };
        let Some(gpu) = backend(plain.clone()) else { return };
        let (b, key, matrices) = &setup[0];
        prove_both(&gpu, key, matrices.assign(b.circuit(Some(4))).unwrap().evaluated().unwrap(), &mut rng);
        let limit = gpu.resident_keys().keys[0].device_bytes;
        let limited =
            CudaOptions { key_memory_limit: Some(limit), products: ProductsPlacement::Gpu, ..plain };
        let Some(gpu) = backend(limited.clone()) else { return };
        assert_eq!(gpu.products(key), ProductsPlacement::Gpu, "until the matrices are tried");
        let steps = prove_both(&gpu, key, matrices.assign(b.circuit(Some(5))).unwrap(), &mut rng);
        assert!(steps.iter().any(|s| s.starts_with("products on the host")), "{steps:?}");
        // from then on synthesis computes them, and the device proves as usual
        assert_eq!(gpu.products(key), ProductsPlacement::Cpu);
        let w = gpu.products(key).ready(matrices.assign(b.circuit(Some(6))).unwrap()).unwrap();
        assert!(matches!(w.abc, Evaluations::Host { .. }));
        let steps = prove_both(&gpu, key, w, &mut rng);
        assert!(!steps.iter().any(|s| s.starts_with("products")), "{steps:?}");

        // a, b, c with no host memory held for them (the pipeline's, once
        // synthesis left them to the device) are refused, not computed on the
        // host, for the caller to make the witness again
        let Some(gpu) = backend(limited) else { return };
        let mut w = matrices.assign(b.circuit(Some(7))).unwrap();
        assert!(w.release_host_products());
        let err = gpu.prove_start(key, w).unwrap_err();
        assert!(matches!(err, ProveError::NoRoomForProducts), "{err:?}");
        assert!(!err.is_bad_input());
        assert_eq!(gpu.products(key), ProductsPlacement::Cpu);
    }

    /// With `G2Placement::Cpu` prove_start leaves B in G2 to prove_finish,
    /// which computes it on the host; dense witnesses (every aux in A, half
    /// in B: the device picks real subsets) prove the same as on the CPU.
    /// One partition in flight: each vector is copied under the device lock,
    /// while the one before it transforms.
    #[test]
    fn gpu_g2_on_the_host_and_dense_witnesses() {
        let options = CudaOptions {
            b_g2_msm: G2Placement::Cpu,
            partitions_in_flight: InFlight::One,
            ..CudaOptions::default()
        };
        let Some(gpu) = backend(options) else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        for k in [6u32, 12] {
            let dense = Builtin { shape: Shape::Dense, log_size: k };
            let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
            let w = synthesize(dense.circuit(Some(7))).unwrap();
            let ours = gpu.prove_start(&key, w.clone()).unwrap();
            let cpu = CpuBackend.prove_start(&key, w).unwrap();
            assert_eq!(ours.g1, cpu.g1, "dense-{k}: G1 parts");
            assert_eq!(ours.b_g2, None, "dense-{k}: B in G2 is left to prove_finish");
            let public = ours.assignment.public_inputs().to_vec();
            let blind = Blinding::random(&mut rng);
            let on_cpu = crate::groth16::prover::finish_on_cpu(&key, cpu, blind);
            let finished = gpu.prove_finish(&key, ours, blind).unwrap();
            assert_eq!(finished.proof, on_cpu, "dense-{k}");
            assert!(finished.proof.verify(&key.vk, &public), "dense-{k}");
        }
    }

    /// Shifted bases (the default, where they fit) give the sums plain bases
    /// give and take their copies' bytes; a key memory limit too small for
    /// the copies keeps the bases plain instead of refusing the key.
    #[test]
    fn gpu_shifted_bases_prove_what_plain_bases_prove() {
        let Some(shifted) = backend(CudaOptions::default()) else { return };
        let plain = backend(CudaOptions { bases: BasesLayout::Plain, ..CudaOptions::default() }).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        // every query has enough terms (2^13 or more) for the shifted layout at 2^14
        let dense = Builtin { shape: Shape::Dense, log_size: 14 };
        let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
        let w = synthesize(dense.circuit(Some(1))).unwrap();
        let cpu = CpuBackend.prove_start(&key, w.clone()).unwrap();
        let on_host = crate::groth16::msm::b_g2(&key, &cpu.assignment);
        let bytes = |gpu: &CudaBackend| gpu.resident_keys().keys[0].device_bytes;
        for (name, gpu) in [("shifted", &shifted), ("plain", &plain)] {
            let ours = gpu.prove_start(&key, w.clone()).unwrap();
            assert_eq!(ours.g1, cpu.g1, "{name}: G1 parts");
            assert_eq!(ours.b_g2, Some(on_host), "{name}: B in G2");
        }
        assert!(bytes(&shifted) > 8 * bytes(&plain), "{} against {}", bytes(&shifted), bytes(&plain));
        let limited = CudaOptions { key_memory_limit: Some(2 * bytes(&plain)), ..CudaOptions::default() };
        let limited = backend(limited).unwrap();
        let ours = limited.prove_start(&key, w).unwrap();
        assert_eq!(ours.g1, cpu.g1, "under a limit: G1 parts");
        assert_eq!(bytes(&limited), bytes(&plain), "under a limit the bases stay plain");
    }

    /// Two keys alternating: both stay resident while they fit (one upload
    /// each); under a limit that holds one, each switch evicts the other and
    /// re-uploads it, and proofs stay right in both cases.
    #[test]
    fn gpu_keeps_several_keys_and_evicts_the_least_recently_used() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let keys =
            [12u32, 13].map(|k| keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap());
        let alternate = |gpu: &CudaBackend, rounds: usize| {
            for r in 0..rounds {
                let (k, key) = [(12u32, &keys[0]), (13, &keys[1])][r % 2];
                let (proof, public) = prove(gpu, key, BenchCircuit::new(k, 4, Some(r as u64))).unwrap();
                assert!(proof.verify(&key.vk, &public), "bench-{k} round {r}");
            }
        };
        let Some(roomy) = backend(CudaOptions::default()) else { return };
        alternate(&roomy, 6);
        let res = roomy.resident_keys();
        assert!(res.keys.iter().all(|k| k.uploads == 1 && k.device_bytes > 0), "{res:?}");
        assert_eq!(res.evictions, 0);

        // plain bases: how B's bases split between inputs and aux does not change the total
        let larger = DeviceKey::bytes_needed(&keys[1], 0, G2Placement::Gpu, BasesLayout::Plain).unwrap();
        let limited = CudaOptions { key_memory_limit: Some(larger + larger / 4), ..CudaOptions::default() };
        let Some(short) = backend(limited) else { return };
        alternate(&short, 6);
        let res = short.resident_keys();
        assert_eq!(res.keys.iter().map(|k| k.uploads).sum::<u64>(), 6, "{res:?}");
        assert_eq!(res.evictions, 5);
        assert_eq!(res.keys.iter().filter(|k| k.device_bytes > 0).count(), 1, "{res:?}");
    }
}
