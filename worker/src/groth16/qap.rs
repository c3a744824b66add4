//! QAP reductions: how a key's circuit turns the a/b/c evaluations of a
//! witness into the coefficients of H, the quotient its H bases expect.
//!
//! The reduction belongs to the key (its kind made the bases for one), not to
//! the backend: every backend asks the key which one to compute.

use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

use super::domain::Domain;

/// How H is computed from the evaluations of A, B and C on the domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// bellperson's (and Filecoin's): A, B and C are moved to the coset g·D
    /// (g Fr's multiplicative generator), where Z(x) = xⁿ − 1 is the constant
    /// gⁿ − 1, H = (A·B − C)/Z is taken pointwise there, and an inverse coset
    /// transform gives H's coefficients; the key's H bases are τⁱ·Z(τ)/δ.
    #[default]
    Bellperson,
}

impl Reduction {
    /// The reduction's name in logs and in `/v1/circuits`.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Bellperson => "bellperson",
        }
    }

    /// H's coefficients on the CPU: the reference every backend is checked
    /// against. a/b/c are consumed (b and c are freed as soon as the
    /// pointwise step is done); shorter vectors are zero-padded. The result
    /// has n − 1 entries (deg H ≤ n − 2).
    pub fn quotient(self, domain: &Domain, a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar>) -> Vec<Scalar> {
        match self {
            Reduction::Bellperson => coset_quotient(domain, a, b, c),
        }
    }
}

fn coset_quotient(
    domain: &Domain,
    mut a: Vec<Scalar>,
    mut b: Vec<Scalar>,
    mut c: Vec<Scalar>,
) -> Vec<Scalar> {
    let n = domain.size();
    for v in [&mut a, &mut b, &mut c] {
        v.resize(n, Scalar::ZERO);
    }
    rayon::join(
        || domain.to_coset(&mut a),
        || rayon::join(|| domain.to_coset(&mut b), || domain.to_coset(&mut c)),
    );
    let z_inv = domain.z_inv_on_coset();
    a.par_iter_mut()
        .zip(b.par_iter())
        .zip(c.par_iter())
        .with_min_len(1 << 12)
        .for_each(|((a, b), c)| *a = (*a * b - c) * z_inv);
    drop((b, c));
    domain.icoset_fft(&mut a);
    a.truncate(n - 1);
    a
}
