//! Groth16 over BLS12-381, split for a pipeline:
//! synthesis → `prove_start` (NTTs, G1 MSMs) → `prove_finish` (G2 MSM, assembly).

pub mod backend;
pub mod cpu;
pub mod domain;
mod error;
pub mod key;
pub mod keygen;
pub mod msm;
mod proof;
pub mod synthesis;

pub use backend::{Backend, Blinding, PendingProof};
pub use cpu::CpuBackend;
pub use error::{ParamsError, ProveError};
pub use key::{PointCheck, ProvingKey, VerifyingKey};
pub use proof::{Proof, ProofDecodeError};
pub use synthesis::{synthesize, Density, Synthesized};

/// Synthesizes `circuit` and proves it on `backend` in one go.
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
    let proof = backend.prove_finish(key, pending, Blinding::random(&mut rand::rngs::OsRng))?;
    Ok((proof, public))
}

#[cfg(test)]
mod tests;
