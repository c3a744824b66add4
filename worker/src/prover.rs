//! The library's front door: prove your own bellperson circuit on the GPU
//! (or the CPU) and get back only proofs that verify.
//!
//! ```no_run
//! # fn demo<C: bellperson::Circuit<blstrs::Scalar>>(circuit: C, params: bellperson::groth16::Parameters<blstrs::Bls12>) -> Result<(), provd::ProverError> {
//! use provd::backend::BackendChoice;
//! let prover = provd::Prover::new(BackendChoice::Auto)?;
//! if let Some(why) = prover.fallback_reason() {
//!     eprintln!("proving on the CPU: {why}");
//! }
//! let key = provd::groth16::ProvingKey::from(params); // moved, not re-encoded
//! let proof = prover.prove(&key, circuit)?;
//! let bellperson_proof = proof.proof.to_bellperson();
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use blstrs::Scalar;

use crate::backend::{self, Backend, BackendChoice, CudaOptions};
use crate::groth16::{Proof, ProveError, ProvingKey, Synthesized, Verifier, VerifyError};

/// Proves bellperson circuits on one backend. Every proof is checked with
/// the key's verifying key before it is returned.
pub struct Prover {
    backend: Arc<dyn Backend>,
    fallback: Option<String>,
    /// Prepared verifying keys by key fingerprint.
    verifiers: Mutex<HashMap<[u8; 32], Arc<Verifier>>>,
}

/// A proof that passed verification, with the public inputs it proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedProof {
    pub proof: Proof,
    /// The circuit's public inputs (the constant ONE excluded).
    pub public_inputs: Vec<Scalar>,
}

/// Why [`Prover`] produced no proof.
#[derive(Debug, thiserror::Error)]
pub enum ProverError {
    /// `BackendChoice::Cuda` and no usable GPU.
    #[error(transparent)]
    NoGpu(#[from] provd_kernels::GpuError),
    /// The circuit, witness or key was refused, or the backend failed.
    #[error(transparent)]
    Prove(#[from] ProveError),
    /// The backend made a proof that does not verify. It was not returned.
    #[error("the proof from backend {backend} failed verification: {reason}")]
    Invalid { backend: String, reason: VerifyError },
}

impl ProverError {
    /// Whether trying again (or on another backend) may succeed: a device
    /// fault or a bad proof, as opposed to a circuit, witness or key that is
    /// wrong and will stay wrong.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProverError::NoGpu(_) | ProverError::Invalid { .. } => true,
            ProverError::Prove(e) => !e.is_bad_input(),
        }
    }
}

impl Prover {
    /// A prover on `choice`, caching compiled GPU kernels under provd's data
    /// directory (`PROVD_DATA_DIR`, else `~/.local/share/provd`).
    pub fn new(choice: BackendChoice) -> Result<Self, ProverError> {
        Self::with_data_dir(choice, &crate::default_data_dir())
    }

    /// As [`Prover::new`], with compiled kernels cached under `data_dir/kernels`.
    pub fn with_data_dir(choice: BackendChoice, data_dir: &Path) -> Result<Self, ProverError> {
        Self::with_options(choice, data_dir, &CudaOptions::default())
    }

    /// As [`Prover::with_data_dir`], with a CUDA backend's options.
    pub fn with_options(
        choice: BackendChoice,
        data_dir: &Path,
        options: &CudaOptions,
    ) -> Result<Self, ProverError> {
        let selected = backend::select(choice, data_dir, options)?;
        Ok(Self::on(selected.first(), selected.fallback))
    }

    /// A prover on the CPU.
    pub fn cpu() -> Self {
        Self::on(Arc::new(backend::CpuBackend), None)
    }

    fn on(backend: Arc<dyn Backend>, fallback: Option<String>) -> Self {
        Self { backend, fallback, verifiers: Mutex::default() }
    }

    /// The backend proofs run on ("cpu", "cuda:0").
    pub fn backend_name(&self) -> &str {
        self.backend.name()
    }

    /// Why the GPU is unused, when `BackendChoice::Auto` fell back to the CPU.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Synthesizes `circuit` with its witness, proves it under `key` and
    /// verifies the proof.
    pub fn prove<C>(&self, key: &ProvingKey, circuit: C) -> Result<VerifiedProof, ProverError>
    where
        C: bellperson::Circuit<Scalar>,
    {
        self.prove_synthesized(key, crate::groth16::synthesize(circuit)?)
    }

    /// Proves an already synthesized witness (a, b, c and the assignment,
    /// as a circuit kind's synthesis makes them) under `key` and verifies it.
    pub fn prove_synthesized(
        &self,
        key: &ProvingKey,
        witness: Synthesized,
    ) -> Result<VerifiedProof, ProverError> {
        let public_inputs = witness.public_inputs().to_vec();
        let pending = self.backend.prove_start(key, witness)?;
        let blind = crate::groth16::Blinding::random(&mut rand::rngs::OsRng);
        let proof = self.backend.prove_finish(key, pending, blind)?.proof;
        self.verifier(key)
            .verify(&proof, &public_inputs)
            .map_err(|reason| ProverError::Invalid { backend: self.backend.name().to_string(), reason })?;
        Ok(VerifiedProof { proof, public_inputs })
    }

    fn verifier(&self, key: &ProvingKey) -> Arc<Verifier> {
        let mut cache = self.verifiers.lock().unwrap_or_else(|e| e.into_inner());
        cache.entry(key.fingerprint()).or_insert_with(|| Arc::new(Verifier::new(&key.vk))).clone()
    }
}
