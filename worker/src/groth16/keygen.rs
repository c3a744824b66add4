//! TEST-ONLY proving keys from random toxic waste.
//!
//! Whoever runs this knows τ, α, β, γ, δ and can forge proofs: these keys exist
//! for benchmarks, demos and tests, never for production. The construction is
//! bellperson's `generate_random_parameters` (so the keys are interchangeable),
//! with parallel fixed-base scalar multiplication from a precomputed table
//! (groth16/fixed_base.rs) in place of one scalar multiplication at a time.

use bellperson::SynthesisError;
use blstrs::{G1Projective, G2Projective, Scalar};
use ff::Field;
use group::{Curve, Group};
use rand_core::RngCore;
use rayon::prelude::*;

use super::domain::{Domain, TwoAdicRoot};
use super::error::ProveError;
use super::fixed_base::FixedBase;
use super::key::{ProvingKey, VerifyingKey};
use super::sparse::SparseMatrix;

/// Generates a TEST-ONLY key for `circuit` from fresh random toxic waste.
pub fn generate_test_key<C, R>(circuit: C, rng: &mut R) -> Result<ProvingKey, ProveError>
where
    C: bellperson::Circuit<Scalar>,
    R: RngCore,
{
    // The circuit's A, B and C, its input constraints appended.
    generate_test_key_for(&super::matrices::Matrices::record(circuit)?, rng)
}

/// As [`generate_test_key`], for a circuit whose matrices are recorded already.
pub fn generate_test_key_for<R: RngCore>(
    matrices: &super::matrices::Matrices,
    rng: &mut R,
) -> Result<ProvingKey, ProveError> {
    let domain = Domain::for_constraints(matrices.num_constraints(), TwoAdicRoot::Seven)?;
    let n = domain.size();

    let waste = ToxicWaste::random(rng);
    let ToxicWaste { tau, alpha, beta, g1, g2, .. } = waste;
    let (gamma_inv, delta_inv) = (waste.gamma.invert().unwrap(), waste.delta.invert().unwrap());

    let lagrange = lagrange_at(tau, domain.log_size(), TwoAdicRoot::Seven);
    // Each variable's u, v, w at τ: its A, B, C columns weighed by the Lagrange basis.
    let ([ma, mb, mc], n_inputs, n_aux) = matrices.parts();
    let weigh = |m: &SparseMatrix| m.weigh_columns(&lagrange, n_inputs, n_aux);
    let ((a_in, a_aux), ((b_in, b_aux), (c_in, c_aux))) =
        rayon::join(|| weigh(ma), || rayon::join(|| weigh(mb), || weigh(mc)));
    let zip3 = |a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar>| -> Vec<[Scalar; 3]> {
        a.into_iter().zip(b).zip(c).map(|((a, b), c)| [a, b, c]).collect()
    };
    let (inputs, aux) = (zip3(a_in, b_in, c_in), zip3(a_aux, b_aux, c_aux));

    // Scalars for each query, then one batched fixed-base multiplication per base.
    let ic_s: Vec<Scalar> = inputs.iter().map(|[a, b, c]| (beta * a + alpha * b + c) * gamma_inv).collect();
    let l_s: Vec<Scalar> = aux.iter().map(|[a, b, c]| (beta * a + alpha * b + c) * delta_inv).collect();
    // As in bellperson: an aux variable in no constraint would make L sparse.
    if l_s.iter().any(|s| bool::from(s.is_zero())) {
        return Err(ProveError::Synthesis(SynthesisError::UnconstrainedVariable));
    }
    let nonzero_of = |col: usize| -> Vec<Scalar> {
        inputs.iter().chain(&aux).map(|v| v[col]).filter(|s| !bool::from(s.is_zero())).collect()
    };
    let (a_s, b_s) = (nonzero_of(0), nonzero_of(1));
    let z_over_delta = (tau.pow_vartime([n as u64]) - Scalar::ONE) * delta_inv;
    let mut h_s = vec![Scalar::ONE; n - 1];
    super::domain::distribute_powers(&mut h_s, z_over_delta, tau);

    let t1 = FixedBase::<G1Projective>::new(g1, h_s.len());
    let t2 = FixedBase::<G2Projective>::new(g2, b_s.len());
    let vk = waste.verifying_key(t1.mul_all(&ic_s));
    Ok(ProvingKey {
        pinned: Default::default(),
        vk,
        h: t1.mul_all(&h_s),
        l: t1.mul_all(&l_s),
        a: t1.mul_all(&a_s),
        b_g1: t1.mul_all(&b_s),
        b_g2: t2.mul_all(&b_s),
        reduction: super::Reduction::Bellperson,
    })
}

/// A TEST-ONLY setup's secrets: τ, α, β, γ, δ and the two generators.
#[derive(Clone, Copy)]
pub(crate) struct ToxicWaste {
    pub tau: Scalar,
    pub alpha: Scalar,
    pub beta: Scalar,
    pub gamma: Scalar,
    pub delta: Scalar,
    pub g1: G1Projective,
    pub g2: G2Projective,
}

impl ToxicWaste {
    pub fn random(rng: &mut impl RngCore) -> Self {
        let [tau, alpha, beta, gamma, delta] = [(); 5].map(|_| nonzero(rng));
        let (g1, g2) = (G1Projective::random(&mut *rng), G2Projective::random(&mut *rng));
        Self { tau, alpha, beta, gamma, delta, g1, g2 }
    }

    /// The verifying key of these secrets, with its IC points.
    pub fn verifying_key(&self, ic: Vec<blstrs::G1Affine>) -> VerifyingKey {
        let Self { alpha, beta, gamma, delta, g1, g2, .. } = *self;
        VerifyingKey {
            alpha_g1: (g1 * alpha).to_affine(),
            beta_g1: (g1 * beta).to_affine(),
            beta_g2: (g2 * beta).to_affine(),
            gamma_g2: (g2 * gamma).to_affine(),
            delta_g1: (g1 * delta).to_affine(),
            delta_g2: (g2 * delta).to_affine(),
            ic,
        }
    }
}

/// A random non-zero scalar (toxic waste).
fn nonzero(rng: &mut impl RngCore) -> Scalar {
    loop {
        let s = Scalar::random(&mut *rng);
        if !bool::from(s.is_zero()) {
            return s;
        }
    }
}

/// L_j(τ) for every j of the domain of 2^log_n points on `root`'s roots of
/// unity: (τ^n − 1)/n · ω^j / (τ − ω^j).
pub(crate) fn lagrange_at(tau: Scalar, log_n: u32, root: TwoAdicRoot) -> Vec<Scalar> {
    let n = 1usize << log_n;
    let omega = root.of_order(log_n);
    let mut w = vec![Scalar::ONE; n];
    super::domain::distribute_powers(&mut w, Scalar::ONE, omega);
    let zn = (tau.pow_vartime([n as u64]) - Scalar::ONE) * Scalar::from(n as u64).invert().unwrap();
    let mut denom: Vec<Scalar> = w.par_iter().map(|w| tau - w).collect();
    denom.par_chunks_mut(1 << 14).for_each(|c| {
        ff::BatchInverter::invert_with_external_scratch(c, &mut vec![Scalar::ZERO; c.len()]);
    });
    w.par_iter().zip(denom.par_iter()).map(|(w, d)| zn * w * d).collect()
}
