//! The CPU backend: rayon NTTs and blst's Pippenger.

use crate::groth16::domain::Domain;
use crate::groth16::prover::{split, PendingProof};
use crate::groth16::{HostProducts, ProveError, ProvingKey, Synthesized};

use super::Backend;

/// Proves on the CPU. Also the reference the GPU backend is checked against.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        key.check_matches(&witness)?;
        let domain = Domain::for_constraints(witness.num_constraints(), key.reduction.root())?;
        let (abc, abc_hold, assignment, a_aux_density) = split(witness);
        // The quotient holds the three at once: c left as a·b is made here.
        let [a, b, c] = abc.on_host(&assignment.input, &assignment.aux, HostProducts::Abc)?.into_abc();
        let h = key.reduction.quotient(&domain, a, b, c);
        // a, b and c are H now.
        drop(abc_hold);
        let g1 = crate::groth16::prover::g1_parts(key, &h, &assignment, &a_aux_density);
        Ok(PendingProof { g1, b_g2: None, assignment, device_seconds: None, steps: Vec::new() })
    }
}
