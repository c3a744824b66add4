//! snarkjs's JSON shapes: `proof.json`, `public.json` and
//! `verification_key.json`, numbers as decimal strings, points as snarkjs's
//! projective triples (affine, z = 1; the identity as [0, 1, 0]).

use blstrs::{Fp, Fp12, Fp2, G1Affine, G2Affine, Scalar};
use ff::PrimeField;
use group::prime::PrimeCurveAffine;
use num_bigint::BigUint;
use serde_json::{json, Value};

use crate::groth16::{Proof, VerifyingKey};

const CURVE: &str = "bls12381";

fn fp(x: &Fp) -> Value {
    BigUint::from_bytes_be(&x.to_bytes_be()).to_string().into()
}

fn fp2(x: &Fp2) -> Value {
    json!([fp(&x.c0()), fp(&x.c1())])
}

/// Fp12 as snarkjs's nested arrays (c0, c1 over Fp6, each c0, c1, c2 over Fp2).
fn fp12(x: &Fp12) -> Value {
    // blstrs does not export its Fp6 type; its coefficients are reached through it.
    let (a, b) = (x.c0(), x.c1());
    json!([[fp2(&a.c0()), fp2(&a.c1()), fp2(&a.c2())], [fp2(&b.c0()), fp2(&b.c1()), fp2(&b.c2())],])
}

/// A scalar as a decimal string (a public signal).
pub fn scalar(x: &Scalar) -> String {
    BigUint::from_bytes_le(x.to_repr().as_ref()).to_string()
}

fn g1(p: &G1Affine) -> Value {
    if bool::from(p.is_identity()) {
        return json!(["0", "1", "0"]);
    }
    json!([fp(&p.x()), fp(&p.y()), "1"])
}

fn g2(p: &G2Affine) -> Value {
    if bool::from(p.is_identity()) {
        return json!([["0", "0"], ["1", "0"], ["0", "0"]]);
    }
    json!([fp2(&p.x()), fp2(&p.y()), ["1", "0"]])
}

/// `proof.json`.
pub fn proof(p: &Proof) -> Value {
    json!({
        "pi_a": g1(&p.a),
        "pi_b": g2(&p.b),
        "pi_c": g1(&p.c),
        "protocol": "groth16",
        "curve": CURVE,
    })
}

/// `public.json`: the public signals (outputs, then public inputs).
pub fn public(inputs: &[Scalar]) -> Value {
    inputs.iter().map(scalar).collect::<Vec<_>>().into()
}

/// `verification_key.json`, as `snarkjs zkey export verificationkey` writes it.
pub fn verification_key(vk: &VerifyingKey) -> Value {
    let alpha_beta = Fp12::from(blstrs::pairing(&vk.alpha_g1, &vk.beta_g2));
    json!({
        "protocol": "groth16",
        "curve": CURVE,
        "nPublic": vk.num_public_inputs(),
        "vk_alpha_1": g1(&vk.alpha_g1),
        "vk_beta_2": g2(&vk.beta_g2),
        "vk_gamma_2": g2(&vk.gamma_g2),
        "vk_delta_2": g2(&vk.delta_g2),
        "vk_alphabeta_12": fp12(&alpha_beta),
        "IC": vk.ic.iter().map(g1).collect::<Vec<_>>(),
    })
}
