//! The GPU peer a provd user would pick instead: bellperson's prover with its
//! `cuda-supraseal` feature (bellperson synthesizes on the CPU, supraseal-c2
//! proves on the GPU), run on provd's built-in circuits and provd's key file.
//!
//! ```text
//! provd-supraseal-bench --circuit dense-22 --params dense-22.v1.test-only.params \
//!     [--runs 5] [--json out.json] [--against provd-bench-prove.json]
//! ```
//!
//! Each proof is timed whole (synthesis and GPU work, as a caller sees it),
//! one warm-up first, and checked with provd's verifier outside the timing.
//! `--against` reads the JSON `provd bench prove` wrote for the same circuit
//! in the same device session and prints the ratio of the two medians.
//!
//! Its kernels must be built without nvcc's `-G`: the release profile has
//! no debug info for that reason (Cargo.toml). Built with it, supraseal-c2
//! looked hung on the H200 (BENCHMARKS.md).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bellperson::groth16::SuprasealParameters;
use blstrs::Bls12;
use provd::circuits::Builtin;
use provd::groth16::{synthesize, PointCheck, Proof, ProvingKey, Verifier};
use serde_json::{json, Value};

struct Args {
    circuit: Builtin,
    params: PathBuf,
    runs: usize,
    json: Option<PathBuf>,
    against: Option<PathBuf>,
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut circuit, mut params, mut runs, mut json, mut against) = (None, None, 5, None, None);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--circuit" => circuit = Some(value()?.parse::<Builtin>()?),
            "--params" => params = Some(PathBuf::from(value()?)),
            "--runs" => runs = value()?.parse().context("--runs")?,
            "--json" => json = Some(PathBuf::from(value()?)),
            "--against" => against = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument {other}; see the doc comment of bench/supraseal/src/main.rs"),
        }
    }
    ensure!(runs > 0, "--runs must be at least 1");
    Ok(Args {
        circuit: circuit.context("--circuit bench-K|dense-K is required")?,
        params: params.context("--params FILE (the circuit's key file) is required")?,
        runs,
        json,
        against,
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    // bellperson says how a proof's time splits ("synthesis time", then
    // "prover time": supraseal-c2's part) at info; RUST_LOG overrides.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("bellperson=info")).init();
    let args = args()?;
    // provd's reading of the key gives the verifying key every proof is
    // checked against; supraseal reads the same file its own way.
    let key = ProvingKey::read_file(&args.params, PointCheck::OnCurve)
        .with_context(|| format!("reading {}", args.params.display()))?;
    ensure!(
        key.domain_size() == args.circuit.constraints(),
        "{} is a key for a domain of {} points, {} has {}",
        args.params.display(),
        key.domain_size(),
        args.circuit,
        args.circuit.constraints()
    );
    let verifier = Verifier::new(&key.vk);
    drop(key);
    eprintln!("{}: provd read the key; supraseal-c2 loading it", args.circuit);
    let t = Instant::now();
    let srs =
        SuprasealParameters::<Bls12>::new(args.params.clone()).context("supraseal-c2 loading the key")?;
    let load = t.elapsed();
    eprintln!("{}: supraseal-c2 loaded the key in {} ms", args.circuit, ms(load));

    let mut times = Vec::with_capacity(args.runs);
    for i in 0..=args.runs {
        let seed = Some(1000 + i as u64);
        let public = synthesize(args.circuit.circuit(seed))?.public_inputs().to_vec();
        let t = Instant::now();
        let p = bellperson::groth16::create_random_proof(
            args.circuit.circuit(seed),
            &srs,
            &mut rand::rngs::OsRng,
        )
        .context("bellperson + supraseal-c2")?;
        let elapsed = t.elapsed();
        eprintln!(
            "{}: proof {i} ({}) in {} ms",
            args.circuit,
            if i == 0 { "warm-up" } else { "timed" },
            ms(elapsed)
        );
        verifier
            .verify(&Proof { a: p.a, b: p.b, c: p.c }, &public)
            .context("the supraseal-c2 proof did not verify")?;
        if i > 0 {
            times.push(elapsed);
        }
    }
    let total = median(times.clone());
    println!(
        "{}: bellperson + supraseal-c2, median of {} proofs after one warm-up: {} ms (key load {} ms); every proof verified",
        args.circuit,
        args.runs,
        ms(total),
        ms(load)
    );
    let mut report = json!({
        "bench": "supraseal-c2",
        "circuit": args.circuit.to_string(),
        "runs": args.runs,
        "key_load_ms": ms(load),
        "median_ms": { "total": ms(total) },
        "samples_ms": times.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
    });
    if let Some(path) = &args.against {
        let theirs: Value = serde_json::from_str(&std::fs::read_to_string(path)?)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        ensure!(
            theirs["circuit"] == args.circuit.to_string(),
            "{} is for {}, not {}",
            path.display(),
            theirs["circuit"],
            args.circuit
        );
        let provd_ms: f64 = theirs["provd"]["median_ms"]["total"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{} has no provd.median_ms.total", path.display()))?;
        let ratio = provd_ms / ms(total);
        println!(
            "| {} | provd/{} {provd_ms} ms | bellperson + supraseal-c2 {} ms | provd / supraseal {ratio:.3} |",
            args.circuit,
            theirs["provd"]["backend"].as_str().unwrap_or("?"),
            ms(total)
        );
        report["provd"] = theirs["provd"].clone();
        report["ratio_provd_over_supraseal"] = json!(format!("{ratio:.3}"));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
