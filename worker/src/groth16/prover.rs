//! The split prover's parts, shared by every backend: what `prove_start`
//! (H and the G1 MSMs) hands to `prove_finish` (the G2 MSM for B and the
//! assembly), and the assembly itself.

use blstrs::{G1Projective, G2Projective, Scalar};
use ff::Field;
use group::{Curve, Group};
use rand_core::RngCore;

use super::key::ProvingKey;
use super::msm;
use super::proof::Proof;
use super::synthesis::{AbcHold, Density, Evaluations, Synthesized};

/// The G1 results of `prove_start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct G1Parts {
    /// Σ h_i · H_i.
    pub h: G1Projective,
    /// Σ aux_i · L_i.
    pub l: G1Projective,
    /// Σ z_i · A_i over the A query (inputs and aux).
    pub a: G1Projective,
    /// Σ z_i · B_i (G1) over the B query.
    pub b_g1: G1Projective,
}

/// The assignment and B-query densities, still needed by the G2 MSM.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub input: Vec<Scalar>,
    pub aux: Vec<Scalar>,
    pub b_input_density: Density,
    pub b_aux_density: Density,
}

impl Assignment {
    /// Public inputs as a verifier sees them.
    pub fn public_inputs(&self) -> &[Scalar] {
        &self.input[1..]
    }
}

/// A partition between `prove_start` and `prove_finish`.
#[derive(Clone, Debug)]
pub struct PendingProof {
    pub g1: G1Parts,
    /// B in G2, where `prove_start` computed it on the device; `None`:
    /// `prove_finish` computes it on the host.
    pub b_g2: Option<G2Projective>,
    pub assignment: Assignment,
    /// Seconds the device was busy with this partition's `prove_start`
    /// (CUDA events around the device work); `None` on the CPU.
    pub device_seconds: Option<f64>,
    /// Wall and device time of each step of `prove_start`, where the backend
    /// measures them (the CUDA backend; empty on the CPU).
    pub steps: Vec<StepTime>,
}

/// One step of a GPU proof: how long the host spent in it and how long the
/// device was busy with it (0 for a host-only step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTime {
    pub step: &'static str,
    pub wall_ms: f64,
    pub device_ms: f64,
}

impl StepTime {
    /// The step of a GPU proof whose device had no room for the circuit's
    /// matrices: a, b and c computed on the host's cores instead (a
    /// benchmark counts its CPU time with the host's).
    pub const PRODUCTS_ON_HOST: &'static str = "products on the host (no room on the device)";

    /// A host-only step that began at `start` and ends now.
    pub fn on_host_since(step: &'static str, start: std::time::Instant) -> Self {
        Self { step, wall_ms: start.elapsed().as_secs_f64() * 1e3, device_ms: 0.0 }
    }
}

/// What `prove_finish` returns: the proof, and the device time it took
/// (when the G2 MSM ran on a GPU).
#[derive(Clone, Debug)]
pub struct Finished {
    pub proof: Proof,
    /// Seconds the device was busy with this partition's `prove_finish`.
    pub device_seconds: Option<f64>,
    /// As [`PendingProof::steps`], for `prove_finish`.
    pub steps: Vec<StepTime>,
}

impl Finished {
    /// `prove_finish` on the host: the G2 MSM by blst, then the assembly.
    pub fn on_cpu(key: &ProvingKey, pending: PendingProof, blind: Blinding) -> Self {
        Self { proof: finish_on_cpu(key, pending, blind), device_seconds: None, steps: Vec::new() }
    }
}

/// The random r, s that make a proof zero-knowledge.
#[derive(Clone, Copy, Debug)]
pub struct Blinding {
    pub r: Scalar,
    pub s: Scalar,
}

impl Blinding {
    pub fn random(rng: &mut impl RngCore) -> Self {
        Self { r: Scalar::random(&mut *rng), s: Scalar::random(rng) }
    }
}

/// Splits a synthesized witness into a, b and c (for the NTTs) with what
/// accounts for them, to be dropped once they are freed, and the
/// assignment the MSMs and `prove_finish` need.
pub fn split(witness: Synthesized) -> (Evaluations, AbcHold, Assignment, Density) {
    let Synthesized {
        abc,
        input_assignment,
        aux_assignment,
        a_aux_density,
        b_input_density,
        b_aux_density,
        abc_hold,
    } = witness;
    let assignment =
        Assignment { input: input_assignment, aux: aux_assignment, b_input_density, b_aux_density };
    (abc, abc_hold, assignment, a_aux_density)
}

/// The B-query MSM over G2, then the assembly.
pub fn finish_on_cpu(key: &ProvingKey, pending: PendingProof, blind: Blinding) -> Proof {
    let PendingProof { g1, b_g2, assignment, .. } = pending;
    let b_g2 = b_g2.unwrap_or_else(|| self::b_g2(key, &assignment));
    assemble(key, &g1, b_g2, blind)
}

/// Groth16's assembly, as bellperson does it.
pub fn assemble(key: &ProvingKey, g1: &G1Parts, b_g2: G2Projective, Blinding { r, s }: Blinding) -> Proof {
    let vk = &key.vk;
    let a = G1Projective::from(vk.alpha_g1) + g1.a + vk.delta_g1 * r;
    let b = G2Projective::from(vk.beta_g2) + b_g2 + vk.delta_g2 * s;
    let b1 = G1Projective::from(vk.beta_g1) + g1.b_g1 + vk.delta_g1 * s;
    // C = s·A + r·B₁ − r·s·δ + H + L  (A and B₁ already include their blinding).
    let c = a * s + b1 * r - vk.delta_g1 * (r * s) + g1.h + g1.l;
    debug_assert!(!bool::from(a.is_identity()));
    Proof { a: a.to_affine(), b: b.to_affine(), c: c.to_affine() }
}

/// The four G1 MSMs of a proof, given H's coefficients.
pub fn g1_parts(key: &ProvingKey, h_coeffs: &[Scalar], asg: &Assignment, a_aux_density: &Density) -> G1Parts {
    let n_in = asg.input.len();
    let h = msm::msm::<G1Projective>(&key.h, h_coeffs);
    let l = msm::msm::<G1Projective>(&key.l, &asg.aux);
    let a = msm::msm::<G1Projective>(&key.a[..n_in], &asg.input)
        + msm::msm::<G1Projective>(&key.a[n_in..], &msm::filter(&asg.aux, a_aux_density));
    let (b_in, b_aux) = key.b_g1.split_at(asg.b_input_density.ones());
    let b_g1 = msm::msm::<G1Projective>(b_in, &msm::filter(&asg.input, &asg.b_input_density))
        + msm::msm::<G1Projective>(b_aux, &msm::filter(&asg.aux, &asg.b_aux_density));
    G1Parts { h, l, a, b_g1 }
}

/// The B-query MSM over G2.
pub fn b_g2(key: &ProvingKey, asg: &Assignment) -> G2Projective {
    let (b_in, b_aux) = key.b_g2.split_at(asg.b_input_density.ones());
    msm::msm::<G2Projective>(b_in, &msm::filter(&asg.input, &asg.b_input_density))
        + msm::msm::<G2Projective>(b_aux, &msm::filter(&asg.aux, &asg.b_aux_density))
}
