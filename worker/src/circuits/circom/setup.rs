//! TEST-ONLY Groth16 setup for a circom circuit: a zkey from its `.r1cs` and
//! fresh random toxic waste, in snarkjs's conventions (the same roots of
//! unity, the public signals' constraints appended to A, H bases on the odd
//! 2n-th roots), so that snarkjs proves with it and verifies its proofs.
//!
//! Whoever runs this knows τ, α, β, γ, δ and can forge proofs. It exists
//! because snarkjs's own setup (powers of tau, then phase 2, in JavaScript)
//! takes hours at the sizes a GPU benchmark needs.

use blstrs::{G1Projective, G2Projective, Scalar};
use ff::Field;
use rand_core::RngCore;

use super::column_of;
use super::r1cs::R1cs;
use super::zkey::Zkey;
use crate::groth16::fixed_base::FixedBase;
use crate::groth16::keygen::{lagrange_at, ToxicWaste};
use crate::groth16::sparse::{Column, SparseMatrix};
use crate::groth16::{ProvingKey, Reduction};

/// The largest domain this generator makes (2^27 points).
const MAX_LOG_DOMAIN: u32 = 27;

/// Why no key was made.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(String);

/// A TEST-ONLY zkey for `r1cs`.
pub fn test_only_zkey(r1cs: &R1cs, rng: &mut impl RngCore) -> Result<Zkey, SetupError> {
    let (wires, public, m) = (r1cs.wires, r1cs.public, r1cs.constraints);
    // snarkjs appends one constraint per public signal (the constant 1 included): A·1 = signal.
    let rows = m + public + 1;
    let log_n = rows.next_power_of_two().trailing_zeros();
    if log_n > MAX_LOG_DOMAIN {
        return Err(SetupError(format!(
            "{rows} constraints need 2^{log_n} points, above 2^{MAX_LOG_DOMAIN}"
        )));
    }
    let n = 1usize << log_n;
    let root = Reduction::Snarkjs.root();
    let waste = ToxicWaste::random(rng);
    let ToxicWaste { tau, alpha, beta, g1, g2, .. } = waste;
    let (gamma_inv, delta_inv) = (waste.gamma.invert().unwrap(), waste.delta.invert().unwrap());

    // A (with snarkjs's public-signal rows), B and C over the witness's columns.
    let matrix = |k: usize, rows: usize, extra: &mut dyn Iterator<Item = (u32, Column, Scalar)>| {
        let mut terms: Vec<(u32, Column, Scalar)> =
            r1cs.matrices[k].iter().map(|&(c, s, v)| (c, column_of(s, public), v)).collect();
        terms.extend(extra);
        SparseMatrix::from_terms(rows, &terms)
    };
    let public_rows = &mut (0..=public as u32).map(|s| (m as u32 + s, Column::Input(s), Scalar::ONE));
    let (a, b, c) = (
        matrix(0, rows, public_rows),
        matrix(1, rows, &mut std::iter::empty()),
        matrix(2, m, &mut std::iter::empty()),
    );

    // u, v, w: each signal's A, B, C polynomials at τ (Lagrange basis on the domain).
    let lagrange = lagrange_at(tau, log_n, root);
    let weigh = |x: &SparseMatrix| {
        let (inputs, aux) = x.weigh_columns(&lagrange, public + 1, wires - public - 1);
        [inputs, aux].concat()
    };
    let (u, v, w) = (weigh(&a), weigh(&b), weigh(&c));
    drop((lagrange, c));
    let combined = |s: usize| beta * u[s] + alpha * v[s] + w[s];
    let ic_s: Vec<Scalar> = (0..=public).map(|s| combined(s) * gamma_inv).collect();
    let c_s: Vec<Scalar> = (public + 1..wires).map(|s| combined(s) * delta_inv).collect();
    // H: the Lagrange basis of the 2n-point domain at its odd points, over δ.
    let h_s: Vec<Scalar> =
        lagrange_at(tau, log_n + 1, root).into_iter().skip(1).step_by(2).map(|l| l * delta_inv).collect();
    debug_assert_eq!(h_s.len(), n);

    let t1 = FixedBase::<G1Projective>::new(g1, h_s.len());
    let t2 = FixedBase::<G2Projective>::new(g2, v.len());
    let key = ProvingKey {
        pinned: Default::default(),
        vk: waste.verifying_key(t1.mul_all(&ic_s)),
        h: t1.mul_all(&h_s),
        l: t1.mul_all(&c_s),
        a: t1.mul_all(&u),
        b_g1: t1.mul_all(&v),
        b_g2: t2.mul_all(&v),
        reduction: Reduction::Snarkjs,
    };

    Ok(Zkey { key, a, b, n_vars: wires, n_public: public })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::circom::{CircomCircuit, Witness};
    use crate::groth16::Verifier;
    use crate::Prover;

    /// x·x = y, y·x = z with z public: the zkey proves and the proof verifies,
    /// and it survives a write and a read.
    #[test]
    fn test_only_zkeys_prove_and_round_trip() {
        let s = Scalar::from;
        // wires: 1, z (public output), x, y
        let r1cs = R1cs {
            wires: 4,
            public: 1,
            constraints: 2,
            matrices: [
                vec![(0, 2, s(1)), (1, 3, s(1))],
                vec![(0, 2, s(1)), (1, 2, s(1))],
                vec![(0, 3, s(1)), (1, 1, s(1))],
            ],
        };
        let zkey = test_only_zkey(&r1cs, &mut rand::rngs::OsRng).unwrap();
        let dir = std::env::temp_dir().join(format!("provd-zkey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.zkey");
        zkey.write(&path).unwrap();
        let (key, circuit) =
            crate::circuits::circom::read_zkey(&path, crate::groth16::PointCheck::Full).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(*key, zkey.key);
        let witness = Witness { values: vec![s(1), s(27), s(3), s(9)] };
        let proved = Prover::cpu().prove_synthesized(&key, circuit.synthesize(&witness).unwrap()).unwrap();
        assert_eq!(proved.public_inputs, vec![s(27)]);
        Verifier::new(&key.vk).verify(&proved.proof, &[s(27)]).unwrap();
        // Without the r1cs a bad witness shows only as a proof that fails verification;
        // with it, synthesis names the constraint.
        let bad = Witness { values: vec![s(1), s(28), s(3), s(9)] };
        let unchecked = circuit.synthesize(&bad).unwrap();
        assert!(matches!(
            Prover::cpu().prove_synthesized(&key, unchecked),
            Err(crate::ProverError::Invalid { .. })
        ));
        let mut checked = CircomCircuit { a: zkey.a, b: zkey.b, c: None, n_vars: 4, n_public: 1 };
        checked.check_with(r1cs).unwrap();
        assert!(checked.synthesize(&witness).is_ok());
        let err = checked.synthesize(&bad).unwrap_err();
        assert!(matches!(err, crate::groth16::ProveError::Unsatisfied { index: 1, .. }), "{err}");
    }
}
