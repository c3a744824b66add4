//! Proof verification with bellperson's verifier (the reference, not our
//! code), its verifying key prepared once per key rather than per proof.

use blstrs::{Bls12, Scalar};

use super::key::VerifyingKey;
use super::proof::Proof;

/// Why a proof was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("{got} public inputs given, the verifying key has {expected}")]
    InputCount { expected: usize, got: usize },
    #[error("the proof fails the pairing check")]
    Invalid,
}

/// A verifying key prepared for repeated checks (its pairing e(α, β) and the
/// G2 line coefficients computed once).
pub struct Verifier {
    pvk: bellperson::groth16::PreparedVerifyingKey<Bls12>,
    inputs: usize,
}

impl Verifier {
    pub fn new(vk: &VerifyingKey) -> Self {
        Self {
            pvk: bellperson::groth16::prepare_verifying_key(&vk.to_bellperson()),
            inputs: vk.num_public_inputs(),
        }
    }

    /// Checks `proof` against the public inputs (ONE excluded).
    pub fn verify(&self, proof: &Proof, public_inputs: &[Scalar]) -> Result<(), VerifyError> {
        if public_inputs.len() != self.inputs {
            return Err(VerifyError::InputCount { expected: self.inputs, got: public_inputs.len() });
        }
        match bellperson::groth16::verify_proof(&self.pvk, &proof.to_bellperson(), public_inputs) {
            Ok(true) => Ok(()),
            _ => Err(VerifyError::Invalid),
        }
    }
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("inputs", &self.inputs).finish_non_exhaustive()
    }
}

impl Proof {
    /// Verifies with bellperson's verifier (the reference, not our code).
    /// Many proofs under one key: prepare a [`Verifier`] once instead.
    pub fn verify(&self, vk: &VerifyingKey, public_inputs: &[Scalar]) -> bool {
        Verifier::new(vk).verify(self, public_inputs).is_ok()
    }
}
