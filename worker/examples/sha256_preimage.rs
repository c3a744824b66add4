//! A Rust program proving its own bellperson circuit with provd's library:
//! "I know a 32-byte preimage of this SHA-256 digest", built from
//! bellperson's SHA-256 gadget, with the digest as the public input.
//!
//! ```sh
//! cargo run --release -p provd --no-default-features --example sha256_preimage -- [auto|cpu|cuda]
//! ```
//!
//! It generates the circuit's parameters with bellperson's own
//! `generate_random_parameters` (as a user without a trusted setup would for a
//! test; the toxic waste is thrown away but was known to this process),
//! proves through `provd::Prover`, which checks the proof before returning it,
//! and verifies it once more with bellperson's verifier.

use std::time::Instant;

use bellperson::gadgets::boolean::{AllocatedBit, Boolean};
use bellperson::gadgets::{multipack, sha256::sha256};
use bellperson::groth16;
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::{Bls12, Scalar};
use sha2::{Digest, Sha256};

/// Knowledge of a preimage of `digest`; `preimage` is `None` at setup.
#[derive(Clone)]
struct Preimage {
    preimage: Option<[u8; 32]>,
}

impl Circuit<Scalar> for Preimage {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        // The preimage as 256 private bits, most significant bit of each byte first.
        let bits = (0..256)
            .map(|i| {
                let value = self.preimage.map(|p| (p[i / 8] >> (7 - i % 8)) & 1 == 1);
                AllocatedBit::alloc(cs.namespace(|| format!("preimage bit {i}")), value).map(Boolean::from)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let digest = sha256(cs.namespace(|| "sha256"), &bits)?;
        // The digest's 256 bits, packed into as few public field elements as fit.
        multipack::pack_into_inputs(cs.namespace(|| "digest"), &digest)
    }
}

/// The public inputs a verifier computes from the digest alone.
fn public_inputs(digest: &[u8]) -> Vec<Scalar> {
    let bits = multipack::bytes_to_bits(digest);
    multipack::compute_multipacking(&bits)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let choice: provd::backend::BackendChoice =
        std::env::args().nth(1).as_deref().unwrap_or("auto").parse()?;
    let t = Instant::now();
    let params = groth16::generate_random_parameters::<Bls12, _, _>(
        Preimage { preimage: None },
        &mut rand::rngs::OsRng,
    )?;
    let bellperson_vk = params.vk.clone();
    println!("setup: bellperson parameters in {:.2} s", t.elapsed().as_secs_f64());

    let prover = provd::Prover::new(choice)?;
    if let Some(why) = prover.fallback_reason() {
        println!("no GPU, proving on the CPU: {why}");
    }
    let key = provd::groth16::ProvingKey::from(params);
    println!("backend {}; circuit domain 2^{}", prover.backend_name(), key.domain_size().trailing_zeros());

    let preimage: [u8; 32] = *b"provd proves what bellperson can";
    let digest = Sha256::digest(preimage);
    let t = Instant::now();
    let proved = prover.prove(&key, Preimage { preimage: Some(preimage) })?;
    println!("proved (and verified by provd) in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);

    // The verifier's side: the digest and bellperson's verifying key, nothing else.
    let expected = public_inputs(&digest);
    assert_eq!(proved.public_inputs, expected, "the proof's public inputs are the digest");
    let pvk = groth16::prepare_verifying_key(&bellperson_vk);
    let ok = groth16::verify_proof(&pvk, &proved.proof.to_bellperson(), &expected)?;
    if !ok {
        return Err("bellperson rejects the proof".into());
    }
    println!("bellperson verifies the proof of a preimage of {}", hex::encode(digest));
    Ok(())
}
