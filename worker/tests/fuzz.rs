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
use provd::circuits::{parse_scalar, BenchConfig, CircuitConfig, CircuitKind};
use provd::groth16::{PointCheck, ProvingKey};

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
