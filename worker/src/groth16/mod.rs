//! Groth16 over BLS12-381, split for a pipeline: synthesis → the QAP
//! reduction and G1 MSMs (`prove_start`) → the G2 MSM and assembly
//! (`prove_finish`). The backends in [`crate::backend`] run these steps.

mod assign;
mod density;
pub mod domain;
mod error;
pub(crate) mod fixed_base;
pub mod huge_pages;
pub mod key;
pub mod keygen;
pub mod matrices;
pub mod matrix_store;
pub mod msm;
pub mod pinned;
mod proof;
pub mod prover;
pub mod qap;
mod scalar_text;
pub mod sparse;
pub mod synthesis;
mod verify;

pub use assign::Parts;
pub use error::{BackendFault, ParamsError, ProveError};
pub use key::{PointCheck, ProvingKey, VerifyingKey};
pub use matrices::Matrices;
pub use proof::{Proof, ProofDecodeError};
pub use prover::{Blinding, Finished, PendingProof, StepTime};
pub use qap::Reduction;
pub use scalar_text::{format_scalar, parse_scalar};
pub use synthesis::{
    synthesize, AbcFrom, AbcHold, Density, HostAbc, HostProducts, SynthesisFn, Synthesized, WitnessCheck,
};
pub use verify::{Verifier, VerifyError};

#[cfg(test)]
pub(crate) mod tests;
