//! QAP reductions: how a key's circuit turns the a/b/c evaluations of a
//! witness into the scalars its H bases expect (the coefficients of the
//! quotient H, or its evaluations).
//!
//! The reduction belongs to the key (its kind made the bases for one), not to
//! the backend: every backend asks the key which one to compute.

use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

use super::domain::{Domain, TwoAdicRoot};

/// How H is computed from the evaluations of A, B and C on the domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// bellperson's (and Filecoin's): A, B and C are moved to the coset g·D
    /// (g Fr's multiplicative generator), where Z(x) = xⁿ − 1 is the constant
    /// gⁿ − 1, H = (A·B − C)/Z is taken pointwise there, and an inverse coset
    /// transform gives H's coefficients; the key's H bases are τⁱ·Z(τ)/δ.
    #[default]
    Bellperson,
    /// snarkjs's (circom's zkeys): A, B and C are moved to the odd 2n-th roots
    /// of unity ω₂ₙ·ωⁱ, where Z is the constant −2; the scalars are the n
    /// evaluations A·B − C there, unscaled, and the key's H bases (τ²ⁱ⁺¹ of
    /// the powers of tau, Lagrange-interpolated by the setup) fold Z and δ in.
    Snarkjs,
}

impl Reduction {
    /// The reduction's name in logs and in `/v1/circuits`.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Bellperson => "bellperson",
            Reduction::Snarkjs => "snarkjs",
        }
    }

    /// The roots of unity the key's setup interpolated on.
    pub fn root(self) -> TwoAdicRoot {
        match self {
            Reduction::Bellperson => TwoAdicRoot::Seven,
            Reduction::Snarkjs => TwoAdicRoot::Five,
        }
    }

    /// H bases a key of this reduction holds for a domain of `n` points.
    pub fn h_len(self, n: usize) -> usize {
        match self {
            Reduction::Bellperson => n - 1,
            Reduction::Snarkjs => n,
        }
    }

    /// The domain size of a key holding `h_len` H bases.
    pub fn domain_size(self, h_len: usize) -> usize {
        match self {
            Reduction::Bellperson => h_len + 1,
            Reduction::Snarkjs => h_len,
        }
    }

    /// H's scalars on the CPU: the reference every backend is checked
    /// against. a/b/c are consumed (b and c are freed as soon as the
    /// pointwise step is done); shorter vectors are zero-padded. The result
    /// has [`Reduction::h_len`] entries, one per H base. `domain` must be on
    /// [`Reduction::root`].
    pub fn quotient(self, domain: &Domain, a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar>) -> Vec<Scalar> {
        match self {
            Reduction::Bellperson => coset_quotient(domain, a, b, c),
            Reduction::Snarkjs => odd_coset_evaluations(domain, a, b, c),
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
    move_each(domain, [&mut a, &mut b, &mut c], Domain::to_coset);
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

/// Zero-pads a, b and c to the domain and moves each, in parallel, with `to`.
fn move_each(domain: &Domain, [a, b, c]: [&mut Vec<Scalar>; 3], to: fn(&Domain, &mut [Scalar])) {
    for v in [&mut *a, &mut *b, &mut *c] {
        v.resize(domain.size(), Scalar::ZERO);
    }
    rayon::join(|| to(domain, a), || rayon::join(|| to(domain, b), || to(domain, c)));
}

fn odd_coset_evaluations(
    domain: &Domain,
    mut a: Vec<Scalar>,
    mut b: Vec<Scalar>,
    mut c: Vec<Scalar>,
) -> Vec<Scalar> {
    move_each(domain, [&mut a, &mut b, &mut c], Domain::to_odd_coset);
    a.par_iter_mut()
        .zip(b.par_iter())
        .zip(c.par_iter())
        .with_min_len(1 << 12)
        .for_each(|((a, b), c)| *a = *a * b - c);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both reductions describe one polynomial H = (A·B − C)/Z: the
    /// snarkjs scalars are H's values at the odd roots times Z there (−2).
    #[test]
    fn snarkjs_evaluations_are_the_quotient_times_z_on_the_odd_coset() {
        let log_n = 5;
        // One domain for both, so that the two describe the same polynomial.
        let domain = Domain::new(log_n);
        let n = domain.size();
        let mut rng = rand::rngs::OsRng;
        // A satisfied system: c = a·b pointwise.
        let a: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let b: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let c: Vec<Scalar> = a.iter().zip(&b).map(|(a, b)| a * b).collect();
        let mut h = Reduction::Bellperson.quotient(&domain, a.clone(), b.clone(), c.clone());
        let got = Reduction::Snarkjs.quotient(&domain, a, b, c);
        assert_eq!(got.len(), Reduction::Snarkjs.h_len(n));
        h.push(Scalar::ZERO); // n coefficients
        domain.to_odd_coset_from_coefficients(&mut h); // H at ω₂ₙ·ω^i
        let minus_two = -Scalar::from(2u64);
        let want: Vec<Scalar> = h.iter().map(|v| v * minus_two).collect();
        assert_eq!(got, want);
    }
}
