//! The CPU backend: rayon NTTs and blst's Pippenger.

use blstrs::Scalar;
use ff::Field;

use super::backend::{split, Backend, PendingProof};
use super::domain::Domain;
use super::error::ProveError;
use super::key::ProvingKey;
use super::msm;
use super::synthesis::Synthesized;

/// Proves on the CPU. Also the reference the GPU backend is checked against.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        key.check_matches(&witness)?;
        let domain = Domain::for_constraints(witness.num_constraints())?;
        let ([a, b, c], assignment, a_aux_density) = split(witness);
        let h = quotient(&domain, a, b, c);
        let g1 = msm::g1_parts(key, &h, &assignment, &a_aux_density);
        Ok(PendingProof { g1, assignment })
    }
}

/// H's coefficients: (A·B − C)/Z computed on a coset, where A, B, C are given
/// by their evaluations on the domain (shorter vectors are zero-padded). The
/// result has n − 1 entries (deg H ≤ n − 2). a/b/c are consumed: b and c are
/// freed as soon as the pointwise step is done.
pub fn quotient(domain: &Domain, mut a: Vec<Scalar>, mut b: Vec<Scalar>, mut c: Vec<Scalar>) -> Vec<Scalar> {
    let n = domain.size();
    for v in [&mut a, &mut b, &mut c] {
        v.resize(n, Scalar::ZERO);
    }
    rayon::join(
        || domain.to_coset(&mut a),
        || rayon::join(|| domain.to_coset(&mut b), || domain.to_coset(&mut c)),
    );
    let z_inv = domain.z_inv_on_coset();
    {
        use rayon::prelude::*;
        a.par_iter_mut()
            .zip(b.par_iter())
            .zip(c.par_iter())
            .with_min_len(1 << 12)
            .for_each(|((a, b), c)| *a = (*a * b - c) * z_inv);
    }
    drop((b, c));
    domain.icoset_fft(&mut a);
    a.truncate(n - 1);
    a
}
