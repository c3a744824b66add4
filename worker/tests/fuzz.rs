//! Fuzz targets for every parser of outside data, on stable Rust with bolero
//! (`cargo test` runs each for a bounded number of inputs; `cargo bolero test
//! fuzz_zkey` etc. runs one under libFuzzer for as long as you like).
//!
//! Each target starts from a valid input of its format, from the corpus in
//! `tests/fuzz-corpus/` (a circom multiplier's zkey, witness and r1cs, made by
//! circom2 and snarkjs) or built here (a bellperson key, request bodies), and
//! applies the generated edits to it: byte overwrites and a truncation, so
//! that the parsers' deep paths are reached, not only their magic checks.
//! The property: the parser returns (a value or an error) and never panics.

use std::io::Cursor;
use std::path::Path;

use provd::circuits::circom::{R1cs, Witness, Zkey};
use provd::circuits::{BenchConfig, CircuitConfig, CircuitKind};
use provd::groth16::{parse_scalar, PointCheck, ProvingKey};

/// Byte overwrites (offset, value) and a length to cut the input to.
type Edits = (Vec<(u16, u8)>, Option<u16>);

fn edited(seed: &[u8], (writes, cut): &Edits) -> Vec<u8> {
    let mut v = seed.to_vec();
    for &(at, byte) in writes {
        if !v.is_empty() {
            let i = at as usize % v.len();
            v[i] = byte;
        }
    }
    if let Some(len) = cut {
        v.truncate(*len as usize);
    }
    v
}

fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus").join(name)).unwrap()
}

/// Inputs each target runs in `cargo test`: bounded, so that CI stays quick
/// (`PROVD_FUZZ_ITERATIONS` raises it for a longer run).
fn iterations() -> usize {
    std::env::var("PROVD_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000)
}

#[test]
fn fuzz_zkey() {
    let seed = corpus("mul.zkey");
    assert!(Zkey::read_from(Cursor::new(&seed), PointCheck::Full).is_ok(), "the seed is valid");
    bolero::check!().with_type::<Edits>().with_iterations(iterations()).for_each(|edits| {
        let _ = Zkey::read_from(Cursor::new(edited(&seed, edits)), PointCheck::Full);
    });
}

#[test]
fn fuzz_wtns() {
    let seed = corpus("mul.wtns");
    assert!(Witness::parse(&seed, 4).is_ok(), "the seed is valid");
    bolero::check!().with_type::<Edits>().with_iterations(iterations()).for_each(|edits| {
        let _ = Witness::parse(&edited(&seed, edits), 4);
    });
}

#[test]
fn fuzz_r1cs() {
    let seed = corpus("mul.r1cs");
    assert!(R1cs::read_from(Cursor::new(&seed)).is_ok(), "the seed is valid");
    bolero::check!().with_type::<Edits>().with_iterations(iterations()).for_each(|edits| {
        let _ = R1cs::read_from(Cursor::new(edited(&seed, edits)));
    });
}

#[test]
fn fuzz_bellperson_key() {
    let dir = tempfile::tempdir().unwrap();
    let kind = bench_4().load(dir.path()).unwrap();
    let mut seed = Vec::new();
    kind.key().write(&mut seed).unwrap();
    assert!(ProvingKey::read(Cursor::new(&seed), PointCheck::Full).is_ok(), "the seed is valid");
    bolero::check!().with_type::<Edits>().with_iterations(iterations()).for_each(|edits| {
        let _ = ProvingKey::read(Cursor::new(edited(&seed, edits)), PointCheck::Full);
    });
}

/// A partition's witness as a request sends it, to each kind's decoder, and
/// public inputs to the scalar parser.
#[test]
fn fuzz_request_witnesses() {
    let dir = tempfile::tempdir().unwrap();
    let bench = bench_4().load(dir.path()).unwrap();
    std::fs::write(dir.path().join("mul.zkey"), corpus("mul.zkey")).unwrap();
    let circom: std::sync::Arc<dyn CircuitKind> = std::sync::Arc::new(
        provd::circuits::CircomKind::load(&provd::circuits::CircomConfig {
            name: "mul".into(),
            zkey: dir.path().join("mul.zkey"),
            r1cs: None,
        })
        .unwrap(),
    );
    let seeds = [
        br#"{"seed": 7, "public_inputs": ["0x2a", "42", "0", "1"]}"#.to_vec(),
        format!(r#"{{"wtns": "{}"}}"#, base64_of(&corpus("mul.wtns"))).into_bytes(),
    ];
    // The kinds are only read by the target; a panic fails the test either way.
    let (bench, circom) = (std::panic::AssertUnwindSafe(bench), std::panic::AssertUnwindSafe(circom));
    bolero::check!().with_type::<(u8, Edits)>().with_iterations(iterations()).for_each(|(which, edits)| {
        let body = edited(&seeds[*which as usize % seeds.len()], edits);
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) {
            let _ = bench.partition(0, value.clone());
            let _ = circom.partition(0, value);
        }
        let _ = circom.partition_from_bytes(0, &body);
        if let Ok(text) = std::str::from_utf8(&body) {
            let _ = parse_scalar(text);
        }
    });
}

/// bench-4 with a TEST-ONLY key (built without the service feature's config helpers).
fn bench_4() -> CircuitConfig {
    CircuitConfig::Bench(BenchConfig { name: "bench-4".into(), log_size: None, shape: None, params: None })
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A 2 KiB sector's job input (its C1 output and ids), as a Filecoin PoRep
/// circuit takes it: parsed, checked against its ids and vanilla proofs, and
/// split into partitions, each built into its circuit. Edited twice over:
/// the JSON's bytes (the parser) and the numbers in it (the digests and
/// indices the checks read).
#[cfg(feature = "filecoin")]
#[test]
fn fuzz_porep_input() {
    use filecoin_proofs_api::RegisteredSealProof;
    use provd::circuits::filecoin::PorepCircuit;
    let seed = corpus("porep-2k.input.json");
    // The checks hold filecoin-proofs' parameters, no interior mutability.
    let circuit =
        std::panic::AssertUnwindSafe(PorepCircuit::new(RegisteredSealProof::StackedDrg2KiBV1_1).unwrap());
    let check = |input: serde_json::Value| {
        if let Ok(parts) = circuit.split(input) {
            for (k, p) in parts.into_iter().enumerate() {
                let _ = circuit.partition(k, p, None);
            }
        }
    };
    let valid: serde_json::Value = serde_json::from_slice(&seed).unwrap();
    assert_eq!(circuit.split(valid.clone()).unwrap().len(), 1, "the seed is valid");
    // Each input is a C1 output's vanilla proof check: fewer of them.
    let n = iterations() / 5;
    bolero::check!().with_type::<Edits>().with_iterations(n).for_each(|edits| {
        if let Ok(v) = serde_json::from_slice(&edited(&seed, edits)) {
            check(v);
        }
    });
    bolero::check!().with_type::<Vec<(u16, u8)>>().with_iterations(n).for_each(|writes| {
        let mut v = valid.clone();
        {
            let mut leaves = Vec::new();
            numbers(&mut v, &mut leaves);
            let len = leaves.len();
            for &(at, value) in writes {
                *leaves[at as usize % len] = value.into();
            }
        }
        check(v);
    });
}

/// Every number in a JSON value, to be overwritten in place.
#[cfg(feature = "filecoin")]
fn numbers<'a>(v: &'a mut serde_json::Value, out: &mut Vec<&'a mut serde_json::Value>) {
    match v {
        serde_json::Value::Number(_) => out.push(v),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| numbers(x, out)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| numbers(x, out)),
        _ => {}
    }
}

/// Writes the corpus of `fuzz_porep_input` (run it by name with --ignored
/// when the C1 format changes): a 2 KiB sector sealed with filecoin-proofs.
#[cfg(feature = "filecoin")]
#[test]
#[ignore]
fn write_porep_corpus() {
    use provd::circuits::filecoin::{prover_id_of_miner, seal::seal_sector, Ids};
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("FIL_PROOFS_PARENT_CACHE", dir.path().join("parents"));
    let ids = Ids { prover_id: prover_id_of_miner(1000), sector_id: 1 };
    let proof = filecoin_proofs_api::RegisteredSealProof::StackedDrg2KiBV1_1;
    let sector = seal_sector(proof, ids, dir.path(), 1).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus/porep-2k.input.json");
    std::fs::write(path, serde_json::to_vec(&sector.input()).unwrap()).unwrap();
}
