//! Prover tests against bellperson: its verifier, its key format and its prover.

use bellperson::groth16 as bp;
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::{Bls12, Scalar};
use ff::Field;
use rand::SeedableRng;

use super::*;
use crate::backend::{prove, CpuBackend};
use crate::circuits::BenchCircuit;

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

fn key_for<C: Circuit<Scalar>>(c: C) -> ProvingKey {
    keygen::generate_test_key(c, &mut rng(42)).unwrap()
}

fn prove_and_verify<C: Circuit<Scalar> + Clone>(c: C) -> (ProvingKey, Proof, Vec<Scalar>) {
    let key = key_for(c.clone());
    let (proof, public) = prove(&CpuBackend, &key, c).unwrap();
    assert!(proof.verify(&key.vk, &public), "proof must verify");
    (key, proof, public)
}

/// x·x = y with y public: one aux, one input, and no input in the B query.
#[derive(Clone)]
pub(crate) struct Square(pub Option<u64>);

impl Circuit<Scalar> for Square {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let x = cs.alloc(|| "x", || self.0.map(Scalar::from).ok_or(SynthesisError::AssignmentMissing))?;
        let y = cs.alloc_input(
            || "y",
            || self.0.map(|v| Scalar::from(v * v)).ok_or(SynthesisError::AssignmentMissing),
        )?;
        cs.enforce(|| "square", |lc| lc + x, |lc| lc + x, |lc| lc + y);
        Ok(())
    }
}

/// Linear constraints only: B is always ONE, so the aux part of the B query is
/// empty, and every C is a fresh variable.
#[derive(Clone)]
struct Linear(Option<u64>);

impl Circuit<Scalar> for Linear {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let v = |k: u64| self.0.map(|s| Scalar::from(s + k)).ok_or(SynthesisError::AssignmentMissing);
        let mut prev = cs.alloc(|| "x0", || v(0))?;
        cs.enforce(|| "x0", |lc| lc + prev, |lc| lc + CS::one(), |lc| lc + prev);
        for k in 1..50u64 {
            // x_k = x_{k-1} + 1
            let next = cs.alloc(|| format!("x{k}"), || v(k))?;
            cs.enforce(
                || format!("step {k}"),
                |lc| lc + prev + CS::one(),
                |lc| lc + CS::one(),
                |lc| lc + next,
            );
            prev = next;
        }
        let out = cs.alloc_input(|| "out", || v(49))?;
        cs.enforce(|| "out", |lc| lc + prev, |lc| lc + CS::one(), |lc| lc + out);
        Ok(())
    }
}

#[test]
fn bench_circuits_verify_at_several_sizes() {
    for k in [4, 7, 10, 13] {
        let (_, _, public) = prove_and_verify(BenchCircuit::new(k, 4, Some(k as u64)));
        assert_eq!(public.len(), 4);
    }
}

#[test]
fn many_public_inputs() {
    prove_and_verify(BenchCircuit::new(9, 120, Some(5)));
}

#[test]
fn empty_density_columns() {
    let (key, _, _) = prove_and_verify(Linear(Some(3)));
    let s = synthesize(Linear(Some(3))).unwrap();
    assert_eq!(s.b_aux_density.ones(), 0, "no aux variable in B");
    assert_eq!(key.b_g1.len(), s.b_input_density.ones());
    let (_, _, _) = prove_and_verify(Square(Some(7)));
    assert_eq!(synthesize(Square(Some(7))).unwrap().b_input_density.ones(), 0, "no input in B");
}

#[test]
fn tiny_circuit_with_one_aux_and_one_input() {
    let (_, _, public) = prove_and_verify(Square(Some(12)));
    assert_eq!(public, vec![Scalar::from(144)]);
}

#[test]
fn wrong_input_or_tampered_proof_fails() {
    let (key, proof, public) = prove_and_verify(BenchCircuit::new(8, 2, Some(1)));
    let mut wrong = public.clone();
    wrong[1] += Scalar::ONE;
    assert!(!proof.verify(&key.vk, &wrong));
    let tampered = Proof { a: proof.c, ..proof };
    assert!(!tampered.verify(&key.vk, &public));
    // A byte flipped in the encoding either fails to decode or fails to verify.
    let mut bytes = proof.to_bytes();
    bytes[100] ^= 1;
    if let Ok(p) = Proof::from_bytes(&bytes) {
        assert!(!p.verify(&key.vk, &public));
    }
    assert_eq!(Proof::from_bytes(&proof.to_bytes()).unwrap(), proof);
    assert!(Proof::from_bytes(&bytes[..10]).is_err());
}

#[test]
fn proof_encoding_matches_bellperson() {
    let (_, proof, _) = prove_and_verify(Square(Some(2)));
    let mut theirs = Vec::new();
    proof.to_bellperson().write(&mut theirs).unwrap();
    assert_eq!(theirs, proof.to_bytes().to_vec());
}

#[test]
fn keys_interoperate_with_bellperson() {
    let circuit = BenchCircuit::new(8, 3, None);
    // provd → bellperson
    let ours = key_for(circuit.clone());
    let mut bytes = Vec::new();
    ours.write(&mut bytes).unwrap();
    let theirs = bp::Parameters::<Bls12>::read(&bytes[..], true).unwrap();
    assert_eq!(theirs.vk.ic, ours.vk.ic);
    assert_eq!(*theirs.h, ours.h);
    assert_eq!(*theirs.b_g2, ours.b_g2);
    // bellperson → provd: a key bellperson generated, read by us, proves with
    // both provers; both proofs verify.
    let bkey = bp::generate_random_parameters::<Bls12, _, _>(circuit.clone(), &mut rng(7)).unwrap();
    let mut bbytes = Vec::new();
    bkey.write(&mut bbytes).unwrap();
    let key = ProvingKey::read(&bbytes[..], PointCheck::Full).unwrap();
    let mut round = Vec::new();
    key.write(&mut round).unwrap();
    assert_eq!(round, bbytes, "re-encoding is byte-identical");
    let witness = BenchCircuit::new(8, 3, Some(11));
    let (ours, public) = prove(&CpuBackend, &key, witness.clone()).unwrap();
    let theirs = bp::create_random_proof(witness, &bkey, &mut rng(8)).unwrap();
    let pvk = bp::prepare_verifying_key(&bkey.vk);
    assert!(bp::verify_proof(&pvk, &ours.to_bellperson(), &public).unwrap());
    assert!(bp::verify_proof(&pvk, &theirs, &public).unwrap());
}

#[test]
fn bad_key_files_are_clear_errors() {
    let key = key_for(Square(None));
    let mut bytes = Vec::new();
    key.write(&mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.params");

    // Truncated anywhere: an error naming what was being read, never a panic.
    for cut in [0, 10, 96, 700, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = ProvingKey::read_file(&path, PointCheck::Full).unwrap_err();
        assert!(
            matches!(err, ParamsError::Truncated { .. } | ParamsError::ImplausibleLength { .. }),
            "cut {cut}: {err}"
        );
    }
    // A corrupted point.
    let mut bad = bytes.clone();
    let at = bytes.len() - 100;
    bad[at] ^= 0x55;
    std::fs::write(&path, &bad).unwrap();
    let err = ProvingKey::read_file(&path, PointCheck::Full).unwrap_err();
    assert!(err.to_string().contains("b_g2[0]"), "{err}");
    // Trailing garbage.
    let mut long = bytes.clone();
    long.extend_from_slice(b"junk");
    std::fs::write(&path, &long).unwrap();
    assert!(matches!(ProvingKey::read_file(&path, PointCheck::Full), Err(ParamsError::TrailingBytes(4))));
    // A huge claimed length.
    let mut huge = bytes.clone();
    let h_len_at = 96 * 2 + 192 * 2 + 96 + 192 + 4 + 96 * key.vk.ic.len();
    huge[h_len_at..h_len_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    std::fs::write(&path, &huge).unwrap();
    let err = ProvingKey::read_file(&path, PointCheck::Full).unwrap_err();
    assert!(matches!(err, ParamsError::ImplausibleLength { what: "h", .. }), "{err}");
    // A missing file names the path.
    let err = ProvingKey::read_file(&dir.path().join("nope"), PointCheck::Full).unwrap_err();
    assert!(err.to_string().contains("nope"));
}

#[test]
fn key_for_another_circuit_is_rejected() {
    let key = key_for(BenchCircuit::new(8, 4, None));
    let err = prove(&CpuBackend, &key, BenchCircuit::new(9, 4, Some(1))).unwrap_err();
    assert!(matches!(err, ProveError::KeyMismatch(_)), "{err}");
    let err = prove(&CpuBackend, &key, BenchCircuit::new(8, 5, Some(1))).unwrap_err();
    assert!(err.to_string().contains("IC points"), "{err}");
}

#[test]
fn unsatisfied_witness_names_the_constraint() {
    #[derive(Clone)]
    struct Lie;
    impl Circuit<Scalar> for Lie {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            Square(Some(3)).synthesize(cs)?;
            let mut ns = cs.namespace(|| "gadget");
            let b = ns.alloc(|| "b", || Ok(Scalar::from(2)))?;
            ns.enforce(|| "b is a bit", |lc| lc + b, |lc| lc + CS::one() - b, |lc| lc);
            Ok(())
        }
    }
    let key = key_for(Square(None));
    let err = prove(&CpuBackend, &key, Lie).unwrap_err();
    assert_eq!(err.to_string(), "witness does not satisfy constraint #1 'gadget/b is a bit'");
}

/// Writers of one key file never share a temporary, and a failed write
/// leaves nothing behind.
#[test]
fn concurrent_key_writes_land_whole_and_leave_no_temporaries() {
    let (key, _, _) = prove_and_verify(Square(Some(3)));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.params");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| key.write_file(&path).unwrap());
        }
    });
    assert_eq!(ProvingKey::read_file(&path, PointCheck::Full).unwrap(), key);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("k.params")], "no temporaries left");
    // A write that fails (no such directory) leaves no file.
    let missing = dir.path().join("no-such-dir").join("k.params");
    assert!(key.write_file(&missing).is_err());
    assert!(!missing.parent().unwrap().exists());
}
