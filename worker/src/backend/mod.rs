//! Where proofs run: the [`Backend`] trait, its CPU and CUDA implementations,
//! and the choice between them (a CUDA device when one is usable, else the
//! CPU, saying why).

mod cpu;
mod cuda;

use std::path::Path;
use std::sync::Arc;

pub use cpu::CpuBackend;
pub use cuda::{CudaBackend, KeyResidency, ResidentKey};

use crate::groth16::prover::{finish_on_cpu, Blinding, Finished, PendingProof};
use crate::groth16::{synthesize, Proof, ProveError, ProvingKey, Synthesized};

/// A proving backend: the CPU, or one CUDA device.
pub trait Backend: Send + Sync {
    /// Short name for logs and metrics ("cpu", "cuda:0").
    fn name(&self) -> &str;

    /// Computes H (by the key's QAP reduction) and the G1 MSMs (A, B in G1,
    /// L, H). Consumes the witness's a/b/c vectors; keeps the assignment for
    /// `prove_finish`.
    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError>;

    /// The G2 MSM for B and the assembly with blinding factors `r`, `s`
    /// (on the CPU unless the backend puts the G2 MSM on its device).
    fn prove_finish(
        &self,
        key: &ProvingKey,
        pending: PendingProof,
        blind: Blinding,
    ) -> Result<Finished, ProveError> {
        Ok(Finished { proof: finish_on_cpu(key, pending, blind), device_seconds: None })
    }

    /// The keys whose bases this backend holds on its device (none on the CPU).
    fn resident_keys(&self) -> KeyResidency {
        KeyResidency::default()
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
}

/// Where a CUDA backend runs B's G2 MSM (`prove_finish`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum, serde::Deserialize))]
#[cfg_attr(feature = "service", serde(rename_all = "lowercase"))]
pub enum G2Placement {
    /// On the device, with the key's G2 bases resident beside its G1 bases.
    #[default]
    Gpu,
    /// On the host's cores (blst), overlapped with the next partition's GPU work.
    Cpu,
}

/// A backend as chosen, with what the caller should know about the choice.
pub struct Selected {
    pub backend: Arc<dyn Backend>,
    /// The GPU it uses, for memory reporting.
    pub gpu: Option<Arc<provd_kernels::Gpu>>,
    /// Set when `Auto` fell back to the CPU: why the GPU is unused.
    pub fallback: Option<String>,
}

/// Builds the chosen backend. `data_dir` holds the compiled-kernel cache.
pub fn select(
    choice: BackendChoice,
    data_dir: &Path,
    options: &CudaOptions,
) -> Result<Selected, provd_kernels::GpuError> {
    let cuda = |b: CudaBackend| {
        let gpu = b.gpu();
        Selected { backend: Arc::new(b), gpu: Some(gpu), fallback: None }
    };
    let cpu = |fallback| Selected { backend: Arc::new(CpuBackend), gpu: None, fallback };
    match choice {
        BackendChoice::Cpu => Ok(cpu(None)),
        BackendChoice::Cuda => Ok(cuda(CudaBackend::open(0, data_dir, options.clone())?)),
        BackendChoice::Auto => match CudaBackend::open(0, data_dir, options.clone()) {
            Ok(b) => Ok(cuda(b)),
            Err(reason) => {
                tracing::warn!("GPU unused, proving on the CPU: {reason}");
                Ok(cpu(Some(reason.to_string())))
            }
        },
    }
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
