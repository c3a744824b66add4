//! Where proofs run: the [`Backend`] trait, its CPU and CUDA implementations,
//! and the choice between them (a CUDA device when one is usable, else the
//! CPU, saying why).

mod cpu;
mod cuda;

use std::path::Path;
use std::sync::Arc;

pub use cpu::CpuBackend;
pub use cuda::{CudaBackend, KeyResidency, ResidentKey};

use crate::groth16::prover::{Blinding, Finished, PendingProof};
use crate::groth16::{synthesize, HostProducts, Proof, ProveError, ProvingKey, Synthesized};

/// A proving backend: the CPU, or one CUDA device.
pub trait Backend: Send + Sync {
    /// Short name for logs and metrics ("cpu", "cuda:0").
    fn name(&self) -> &str;

    /// Computes H (by the key's QAP reduction) and the G1 MSMs (A, B in G1,
    /// L, H), and B's G2 MSM where the backend runs it on its device.
    /// Consumes the witness's a/b/c vectors; keeps the assignment for
    /// `prove_finish`.
    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError>;

    /// The assembly with blinding factors `r`, `s`, after the G2 MSM for B
    /// on the CPU where `prove_start` left it out (`PendingProof::b_g2`).
    fn prove_finish(
        &self,
        key: &ProvingKey,
        pending: PendingProof,
        blind: Blinding,
    ) -> Result<Finished, ProveError> {
        Ok(Finished::on_cpu(key, pending, blind))
    }

    /// Host bytes one partition's `prove_start` and `prove_finish` allocate
    /// beyond its witness, counted in its memory reservation: on the CPU,
    /// H's coefficients and the MSMs' filtered scalars ([`cpu_working_bytes`]).
    fn host_working_bytes(&self, key: &ProvingKey) -> u64 {
        cpu_working_bytes(key)
    }

    /// The keys whose bases this backend holds on its device (none on the CPU).
    fn resident_keys(&self) -> KeyResidency {
        KeyResidency::default()
    }

    /// Uploads `key`'s bases to the device now, as its first partition
    /// would (evicting the least recently used keys where room is short);
    /// whether they were resident already. `b_inputs`: the inputs in B's
    /// query (the circuit's, not a witness's: [`CircuitKind::b_dense_inputs`](crate::circuits::CircuitKind::b_dense_inputs)).
    /// The CPU holds every key in host memory: always resident.
    fn preload(&self, key: &ProvingKey, b_inputs: usize) -> Result<bool, ProveError> {
        let _ = (key, b_inputs);
        Ok(true)
    }

    /// Drops `key`'s bases from the device (a later partition uploads them
    /// again); the device bytes freed, 0 where none were resident.
    fn evict(&self, key: &ProvingKey) -> u64 {
        let _ = key;
        0
    }

    /// How many partitions the engine should hand this backend at once (one
    /// GPU worker each): a second one's copies to the device overlap the
    /// first one's kernels.
    fn partitions_in_flight(&self) -> InFlight {
        InFlight::One
    }

    /// Where a, b and c of `key`'s circuit that are still products of its
    /// recorded matrices
    /// ([`Evaluations::Products`](crate::groth16::synthesis::Evaluations))
    /// are best computed for this backend. [`ProductsPlacement::ready`]
    /// computes them on the host when that is the host, so that they are
    /// part of synthesis (parallel over partitions) rather than of
    /// `prove_start`.
    fn products(&self, _key: &ProvingKey) -> ProductsPlacement {
        ProductsPlacement::Cpu
    }

    /// What this backend takes of a, b and c computed on the host from
    /// recorded matrices: all three, checked (the CPU's quotient holds
    /// them at once), or a and b alone, c left for it to make as a·b.
    fn host_products(&self) -> HostProducts {
        HostProducts::Abc
    }
}

/// Host bytes the CPU prover allocates for one partition beyond its witness:
/// H's coefficients over the domain and the MSMs' filtered scalars.
pub fn cpu_working_bytes(key: &ProvingKey) -> u64 {
    let vars = (key.vk.ic.len() + key.l.len()) as u64;
    key.domain_size() as u64 * 32 + vars * 32
}

/// Partitions in `prove_start` on one device at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InFlight {
    /// One: its copies to the device wait for the previous partition's
    /// kernels to end, and the next one's for its own.
    One,
    /// Two (the default: 1.10–1.35× the proofs per second of one on the
    /// H200, BENCHMARKS.md): while one partition's kernels run, the next
    /// one's vectors are copied to the device, at the cost of those copies
    /// (a, b, c and the assignment) in device memory while it waits at the
    /// device lock. More would only queue behind the one the device is
    /// computing.
    #[default]
    Two,
}

impl InFlight {
    pub fn count(self) -> usize {
        match self {
            InFlight::One => 1,
            InFlight::Two => 2,
        }
    }
}

impl std::fmt::Display for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.count())
    }
}

impl std::str::FromStr for InFlight {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "1" => Ok(InFlight::One),
            "2" => Ok(InFlight::Two),
            _ => Err(format!("partitions in flight per GPU are 1 or 2, not '{s}'")),
        }
    }
}

#[cfg(feature = "service")]
impl<'de> serde::Deserialize<'de> for InFlight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match u64::deserialize(d)? {
            1 => Ok(InFlight::One),
            2 => Ok(InFlight::Two),
            n => Err(serde::de::Error::custom(format!("partitions in flight per GPU are 1 or 2, not {n}"))),
        }
    }
}

/// Which backend to prove on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum))]
pub enum BackendChoice {
    /// The GPU if usable, otherwise the CPU (and the reason the GPU is unused).
    Auto,
    Cpu,
    /// A CUDA device; an error if none is usable.
    Cuda,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(format!("unknown backend '{s}' (auto, cpu or cuda)")),
        }
    }
}

/// Settings of a CUDA backend.
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    /// Device bytes the resident keys' bases may take at most (besides what
    /// the device has free); `None`: as much as the device has.
    pub key_memory_limit: Option<u64>,
    /// Where B's G2 MSM runs.
    pub b_g2_msm: G2Placement,
    /// Which devices to open, one backend each.
    pub devices: DeviceSet,
    /// Partitions in `prove_start` on each device at once.
    pub partitions_in_flight: InFlight,
    /// How a key's G1 bases are laid out on the device.
    pub bases: BasesLayout,
    /// Where a, b and c of recorded circuits are computed.
    pub products: ProductsPlacement,
}

/// The CUDA devices a worker proves on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSet {
    /// Every device the driver lists.
    #[default]
    All,
    /// These ordinals.
    List(Vec<usize>),
}

impl DeviceSet {
    /// The ordinals to open, given how many devices there are.
    pub fn ordinals(&self, count: usize) -> Result<Vec<usize>, String> {
        match self {
            DeviceSet::All => Ok((0..count).collect()),
            DeviceSet::List(list) => {
                if list.is_empty() {
                    return Err("gpu.devices lists no device".into());
                }
                if let Some(bad) = list.iter().find(|&&d| d >= count) {
                    return Err(format!("gpu.devices names device {bad}, but {count} are present"));
                }
                let mut seen = std::collections::BTreeSet::new();
                if let Some(dup) = list.iter().find(|d| !seen.insert(**d)) {
                    return Err(format!("gpu.devices names device {dup} twice"));
                }
                Ok(list.clone())
            }
        }
    }
}

/// Where a CUDA backend runs B's G2 MSM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum, serde::Deserialize))]
#[cfg_attr(feature = "service", serde(rename_all = "lowercase"))]
pub enum G2Placement {
    /// On the device, in `prove_start` beside the G1 MSMs, with the key's G2
    /// bases resident beside its G1 bases.
    #[default]
    Gpu,
    /// On the host's cores (blst), in `prove_finish`, overlapped with the next
    /// partition's GPU work.
    Cpu,
}

/// Where a CUDA backend computes a, b and c for circuits whose constraint
/// matrices are recorded (bench and Filecoin circuits; circom's are computed
/// on the host).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum, serde::Deserialize))]
#[cfg_attr(feature = "service", serde(rename_all = "lowercase"))]
pub enum ProductsPlacement {
    /// On the device, from the matrices uploaded once beside the key's bases
    /// and the assignment copied there for the MSMs anyway: the host then
    /// only computes the assignment, and a, b, c are never copied. Where the
    /// matrices do not fit in the device's free memory, on the host.
    #[default]
    Gpu,
    /// On the host's cores, in synthesis; a, b and c are copied to the device.
    Cpu,
}

impl ProductsPlacement {
    /// `witness` as a backend with this placement takes it: a, b and c that
    /// are still products of recorded matrices are computed here, on the
    /// host's cores, as `host` says (all three, checked, or a and b alone),
    /// unless the backend computes them on its device. Called at the end of
    /// synthesis.
    pub fn ready(self, witness: Synthesized, host: HostProducts) -> Result<Synthesized, ProveError> {
        match self {
            ProductsPlacement::Gpu => Ok(witness),
            ProductsPlacement::Cpu => witness.evaluated_as(host),
        }
    }
}

/// How a CUDA backend lays out a key's large G1 queries (H, L, A's and B's
/// aux bases) on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum, serde::Deserialize))]
#[cfg_attr(feature = "service", serde(rename_all = "lowercase"))]
pub enum BasesLayout {
    /// With precomputed shifted copies (one per MSM window: 11 to 15 times
    /// the plain bytes from 2^20 points up, more below), so that one bucket
    /// set serves every window, when they fit in the device's free memory
    /// beside the keys already resident and the partitions' working buffers;
    /// plain otherwise. Never evicts a key to make room for the copies.
    #[default]
    Shifted,
    /// The bases alone: the least device memory of the resident layouts.
    Plain,
    /// In the host's memory, page-locked in place (counted once, in the
    /// key's host bytes, for every device), copied to the device a chunk at
    /// a time during each MSM while the chunk before is summed (B's G2
    /// query too, where `gpu.b_g2_msm` keeps that MSM on the device). The
    /// device holds the inputs' bases, two chunks, and a proof that keeps
    /// two vectors of the domain there at a time. What a key gets by itself
    /// where its plain bases do not fit the device (or
    /// `gpu.key_memory_limit`) beside a partition's working buffers: cards
    /// smaller than the key prove it, rather than refuse it.
    Streamed,
}

impl BasesLayout {
    pub const ALL: [BasesLayout; 3] = [BasesLayout::Shifted, BasesLayout::Plain, BasesLayout::Streamed];

    /// As the config and the metrics' `layout` label spell it.
    pub fn name(self) -> &'static str {
        match self {
            BasesLayout::Shifted => "shifted",
            BasesLayout::Plain => "plain",
            BasesLayout::Streamed => "streamed",
        }
    }
}

/// The backends as chosen (one per device), with what the caller should
/// know about the choice.
pub struct Selected {
    /// One per GPU opened, or the CPU.
    pub backends: Vec<Arc<dyn Backend>>,
    /// The GPUs they use, for memory reporting.
    pub gpus: Vec<Arc<provd_kernels::Gpu>>,
    /// Set when `Auto` fell back to the CPU: why the GPU is unused.
    pub fallback: Option<String>,
}

impl Selected {
    /// The first backend, for a caller that proves on one.
    pub fn first(&self) -> Arc<dyn Backend> {
        self.backends[0].clone()
    }
}

/// Builds the chosen backends: one per device of `options.devices` for CUDA.
/// `data_dir` holds the compiled-kernel cache.
pub fn select(
    choice: BackendChoice,
    data_dir: &Path,
    options: &CudaOptions,
) -> Result<Selected, provd_kernels::GpuError> {
    let cpu = |fallback| Selected { backends: vec![Arc::new(CpuBackend)], gpus: Vec::new(), fallback };
    match choice {
        BackendChoice::Cpu => Ok(cpu(None)),
        BackendChoice::Cuda => open_cuda(data_dir, options),
        BackendChoice::Auto => match open_cuda(data_dir, options) {
            Ok(s) => Ok(s),
            Err(reason) => {
                tracing::warn!("GPU unused, proving on the CPU: {reason}");
                Ok(cpu(Some(reason.to_string())))
            }
        },
    }
}

fn open_cuda(data_dir: &Path, options: &CudaOptions) -> Result<Selected, provd_kernels::GpuError> {
    let count = provd_kernels::Gpu::count()?;
    let ordinals = options.devices.ordinals(count).map_err(provd_kernels::GpuError::Unavailable)?;
    if ordinals.is_empty() {
        return Err(provd_kernels::GpuError::Unavailable("the driver lists no CUDA device".into()));
    }
    let mut selected = Selected { backends: Vec::new(), gpus: Vec::new(), fallback: None };
    for ordinal in ordinals {
        let b = CudaBackend::open(ordinal, data_dir, options.clone())?;
        selected.gpus.push(b.gpu());
        selected.backends.push(Arc::new(b));
    }
    Ok(selected)
}

/// Synthesizes `circuit` and proves it on `backend` in one go, without
/// verifying the proof (see [`crate::Prover`] for the checked front door).
pub fn prove<C>(
    backend: &dyn Backend,
    key: &ProvingKey,
    circuit: C,
) -> Result<(Proof, Vec<blstrs::Scalar>), ProveError>
where
    C: bellperson::Circuit<blstrs::Scalar>,
{
    let witness = synthesize(circuit)?;
    let public = witness.public_inputs().to_vec();
    let pending = backend.prove_start(key, witness)?;
    let finished = backend.prove_finish(key, pending, Blinding::random(&mut rand::rngs::OsRng))?;
    Ok((finished.proof, public))
}
