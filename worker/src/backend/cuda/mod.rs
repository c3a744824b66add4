//! The CUDA backend: H by the NTT chain (no bit-reversal pass) and the four G1
//! MSMs on the GPU, with the bases of several proving keys resident on the
//! device at once (least recently used evicted when device memory runs short).
//! B's G2 MSM (`prove_finish`) runs on the device too, its bases resident
//! beside the G1 ones, unless `G2Placement::Cpu` keeps it on the host.
//!
//! By responsibility:
//! - [`residency`]: what stays on the device and what is evicted (rules
//!   tested on the CPU against a fake device);
//! - `device_key`: a key's bases and a circuit's matrices on the device;
//! - `copy_plan`: which copies go ahead of the device lock;
//! - `h_chain`: H's scalars by the NTT chain;
//! - `proof`: one partition's device work, step by step.

mod copy_plan;
mod device_key;
mod h_chain;
mod proof;
pub(crate) mod residency;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use provd_kernels::ntt::TwoAdicRoot;
use provd_kernels::{Gpu, GpuError, Msm, Ntt, Timer};

use super::{Backend, BasesLayout, CudaOptions, G2Placement, InFlight, ProductsPlacement};
use crate::groth16::prover::{Blinding, Finished, PendingProof, StepTime};
use crate::groth16::{HostProducts, ProveError, ProvingKey, Synthesized};
use residency::{ForProof, Residency, Rules};

// The device's sparse products read columns as the host's matrices encode them.
const _: () = assert!(crate::groth16::sparse::AUX == provd_kernels::AUX_COLUMN);

/// Proves with one CUDA device.
pub struct CudaBackend {
    name: String,
    gpu: Arc<Gpu>,
    msm: Msm,
    /// A second MSM engine, on a stream of its own: a streamed key's L runs
    /// on it beside H, reading its bases over the link while H's kernels
    /// leave it idle.
    msm_beside: Msm,
    options: CudaOptions,
    state: Mutex<State>,
    /// Device bytes free when it was opened, before any key: what keys and
    /// partitions may have (less than the card where another process, or a
    /// ballast, holds some).
    capacity: u64,
    /// Keys (fingerprints) whose circuit matrices did not fit on the device
    /// the last time they were tried ([`Residency::no_room`]); apart from
    /// `state`, so that synthesis can ask without waiting for the device.
    no_room: Arc<Mutex<HashSet<[u8; 32]>>>,
    /// [`Residency::published`]: the keys on the device, read without
    /// waiting for the proof that holds `state`.
    resident: Arc<Mutex<KeyResidency>>,
}

/// What one proof at a time uses on the device.
struct State {
    /// NTT engines by the roots of unity their keys were set up on.
    ntts: HashMap<TwoAdicRoot, Ntt>,
    /// The keys resident on the device.
    residency: Residency<Gpu>,
    /// CUDA events around each piece of device work, for the device's busy time.
    timer: Timer,
    /// The last proof's device memory against what its room check asked.
    last_peak: Option<DevicePeak>,
}

/// A proof's own device memory at its peak, read from the allocator's pool
/// ([`provd_kernels::Gpu::pool_usage`]), beside what the room check asked
/// for it ([`Rules::proof_bytes`]): the rule must never ask less than a
/// proof takes, or a small card runs out of memory inside a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePeak {
    pub used: u64,
    pub asked: u64,
}

impl State {
    /// Makes the NTT tables that proofs of `key` keep for its domain (the
    /// chain's twiddles and coset powers) before the first such proof
    /// allocates anything, right after the allocator's pool is handed back.
    /// Made mid-chain, a small table was carved out of a vector the chain
    /// had freed, and the pool could not hand that vector's block back
    /// while the table lived: every later room check read it as taken
    /// (~0.44 GiB after a 512 MiB sector's first proof, which refused the
    /// next under a cap below its key).
    fn make_ntt_tables(&mut self, gpu: &Arc<Gpu>, key: &ProvingKey) -> Result<(), GpuError> {
        let log_n = key.domain_size().trailing_zeros();
        let chain = h_chain::chain_of(key.reduction);
        let ntt = h_chain::ntt_for(&mut self.ntts, gpu, key.reduction);
        if ntt.chain_ready(chain, log_n) {
            return Ok(());
        }
        gpu.memory_reclaimed()?;
        ntt.prepare_chain(chain, log_n)
    }

    /// The device as a proof of `key` sees it: with the NTT tables kept for
    /// its domain counted as room ([`ForProof`]).
    fn device_for<'a>(&self, gpu: &'a Gpu, key: &ProvingKey) -> ForProof<'a, Gpu> {
        let log_n = key.domain_size().trailing_zeros();
        let kept = self.ntts.get(&key.reduction.root()).map_or(0, |ntt| ntt.kept_bytes(log_n));
        ForProof { dev: gpu, kept }
    }
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
    /// How it is held on the device now (`Streamed`: read from the host's
    /// memory by each MSM); `None` once evicted.
    pub layout: Option<BasesLayout>,
}

fn backend_error(e: GpuError) -> ProveError {
    ProveError::Backend { backend: "cuda", source: e.into() }
}

impl CudaBackend {
    /// Opens device `ordinal`; kernels are cached under `data_dir/kernels`.
    pub fn open(ordinal: usize, data_dir: &Path, options: CudaOptions) -> Result<Self, GpuError> {
        let gpu = Arc::new(Gpu::open(ordinal, &data_dir.join("kernels"))?);
        let name = format!("cuda:{ordinal}");
        let residency = Residency::new(name.clone(), Self::rules_of(&options));
        let (free, _) = gpu.memory()?;
        Ok(Self {
            capacity: free as u64,
            no_room: residency.no_room(),
            resident: residency.published(),
            state: Mutex::new(State {
                ntts: HashMap::new(),
                residency,
                timer: gpu.timer()?,
                last_peak: None,
            }),
            msm: Msm::new(gpu.clone()),
            msm_beside: Msm::on_own_stream(gpu.clone())?,
            name,
            options,
            gpu,
        })
    }

    pub fn gpu(&self) -> Arc<Gpu> {
        self.gpu.clone()
    }

    /// The last proof's device memory at its peak against what its room
    /// check asked; `None` before a proof, or where the device has no
    /// stream-ordered pool to read it from.
    pub fn last_device_peak(&self) -> Option<DevicePeak> {
        self.lock().last_peak
    }

    fn rules_of(options: &CudaOptions) -> Rules {
        Rules {
            key_memory_limit: options.key_memory_limit,
            bases: options.bases,
            g2: options.b_g2_msm,
            partitions_in_flight: options.partitions_in_flight.count() as u64,
        }
    }

    fn rules(&self) -> Rules {
        Self::rules_of(&self.options)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    /// filtered scalars and the staging are device or per-device memory;
    /// a streamed key's bases are its own, page-locked in place); the CPU
    /// prover's where the config leaves B's G2 MSM to the host.
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

    /// a and b: c is made as a·b in place of a's host copy (already on the
    /// device) while b is copied and transformed, so the host never
    /// computes C's product nor holds a third vector.
    fn host_products(&self) -> HostProducts {
        HostProducts::Ab
    }

    fn resident_keys(&self) -> KeyResidency {
        self.resident.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn preload(&self, key: &ProvingKey, b_inputs: usize) -> Result<bool, ProveError> {
        let mut state = self.lock();
        let already = state.residency.is_resident(&key.fingerprint());
        let device = state.device_for(&self.gpu, key);
        state.residency.make_resident(&device, key, b_inputs)?;
        Ok(already)
    }

    /// Under the device's lock, which a partition holds while it uses the
    /// bases: never from under one.
    fn evict(&self, key: &ProvingKey) -> u64 {
        self.lock().residency.evict(&key.fingerprint())
    }
}

#[cfg(test)]
mod tests;
