//! `provd bench prove`: whole proofs, provd's backend against bellperson's
//! prover on the same circuit and key, interleaved so both see the same noise.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use blstrs::Bls12;
use serde_json::json;

use super::{environment, median, ms, print_table, write_json};
use crate::backend::{Backend, ProductsPlacement};
use crate::circuits::Builtin;
use crate::groth16::{synthesize, Blinding, Matrices, ProvingKey, StepTime, Verifier};

pub struct ProveBench {
    pub circuit: Builtin,
    pub runs: usize,
    pub vs_bellperson: bool,
    pub baseline: SynthesisBaseline,
    pub json: PathBuf,
}

/// What synthesis by recorded matrices is timed against in the same runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthesisBaseline {
    /// The recorder on the same witness, before each proof (at 2^24 that is
    /// seconds a run: a GPU session short of time may skip it).
    #[default]
    Recorder,
    /// No baseline.
    None,
}

#[derive(Default)]
struct Stages {
    synth: Vec<Duration>,
    /// The recorder's synthesis of the same witness, the baseline of `synth`.
    recorder: Vec<Duration>,
    start: Vec<Duration>,
    /// The device's busy time over the proof (CUDA events; `prove_start`,
    /// and `prove_finish` when the G2 MSM runs there); empty on the CPU.
    device: Vec<Duration>,
    finish: Vec<Duration>,
    total: Vec<Duration>,
    /// The check every proof gets before it leaves (not part of `total`).
    verify: Vec<Duration>,
    /// Each proof's steps (`prove_start`'s, then `prove_finish`'s) where the
    /// backend times them; empty on the CPU.
    steps: Vec<Vec<(&'static str, StepTime)>>,
}

impl ProveBench {
    pub fn run(&self, backend: &dyn Backend, key: &ProvingKey) -> anyhow::Result<()> {
        let bkey = self.vs_bellperson.then(|| to_bellperson(key));
        let t = Instant::now();
        let verifier = Verifier::new(&key.vk);
        let prepare = t.elapsed();
        // Partitions are synthesized as the service does: by sparse products
        // over matrices recorded once. The recorder is timed beside them.
        let t = Instant::now();
        let matrices = Arc::new(Matrices::record(self.circuit.circuit(None))?);
        let record = t.elapsed();
        let mut ours = Stages::default();
        let mut theirs = Vec::new();
        // One warm-up of each, then `runs` interleaved pairs.
        for i in 0..=self.runs {
            let seed = Some(1000 + i as u64);
            let t_recorder = match self.baseline {
                SynthesisBaseline::Recorder => {
                    let t = Instant::now();
                    drop(synthesize(self.circuit.circuit(seed))?);
                    Some(t.elapsed())
                }
                SynthesisBaseline::None => None,
            };
            let t = Instant::now();
            // a, b and c by sparse products: here, or on the device where the
            // backend computes them there (a step of `prove_start` then)
            let w = backend
                .products(key)
                .ready(matrices.assign(self.circuit.circuit(seed))?, backend.host_products())?;
            let t_synth = t.elapsed();
            let public = w.public_inputs().to_vec();
            let pending = backend.prove_start(key, w)?;
            let t_start = t.elapsed();
            let started_on_device = pending.device_seconds;
            let started_steps = pending.steps.clone();
            let finished = backend.prove_finish(key, pending, Blinding::random(&mut rand::rngs::OsRng))?;
            let steps: Vec<_> = (started_steps.into_iter().map(|s| ("start", s)))
                .chain(finished.steps.iter().map(|s| ("finish", *s)))
                .collect();
            let (proof, device) = (
                finished.proof,
                [started_on_device, finished.device_seconds]
                    .into_iter()
                    .flatten()
                    .reduce(|a, b| a + b)
                    .map(Duration::from_secs_f64),
            );
            let t_total = t.elapsed();
            let t = Instant::now();
            verifier.verify(&proof, &public).context("provd proof did not verify")?;
            let t_verify = t.elapsed();
            if i > 0 {
                ours.synth.push(t_synth);
                ours.recorder.extend(t_recorder);
                ours.start.push(t_start - t_synth);
                ours.device.extend(device);
                ours.finish.push(t_total - t_start);
                ours.total.push(t_total);
                ours.verify.push(t_verify);
                if !steps.is_empty() {
                    ours.steps.push(steps);
                }
            }
            if let Some(bkey) = &bkey {
                let t = Instant::now();
                let p = bellperson::groth16::create_random_proof(
                    self.circuit.circuit(seed),
                    bkey,
                    &mut rand::rngs::OsRng,
                )
                .context("bellperson prover")?;
                let elapsed = t.elapsed();
                let pvk = bellperson::groth16::prepare_verifying_key(&bkey.vk);
                anyhow::ensure!(
                    bellperson::groth16::verify_proof(&pvk, &p, &public)?,
                    "bellperson proof did not verify"
                );
                if i > 0 {
                    theirs.push(elapsed);
                }
            }
        }
        let total = median(&ours.total);
        let mut rows = vec![vec![
            format!("provd/{}", backend.name()),
            ms(median(&ours.synth)),
            ms(median(&ours.start)),
            if ours.device.is_empty() { "".into() } else { ms(median(&ours.device)) },
            ms(median(&ours.finish)),
            ms(total),
            ms(median(&ours.verify)),
            "1.00".into(),
        ]];
        let verify = median(&ours.verify);
        let mut report = json!({
            "bench": "prove",
            "circuit": self.circuit.to_string(),
            "runs": self.runs,
            "env": environment(),
            "provd": {
                "backend": backend.name(),
                "products": format!("{:?}", backend.products(key)).to_lowercase(),
                "median_ms": { "synthesis": ms(median(&ours.synth)), "prove_start": ms(median(&ours.start)),
                               "gpu_device": (!ours.device.is_empty()).then(|| ms(median(&ours.device))),
                               "prove_finish": ms(median(&ours.finish)), "total": ms(total),
                               "verify": ms(verify) },
                "verify_prepare_ms": ms(prepare),
                "record_matrices_ms": ms(record),
                "recorder_synthesis_ms": (!ours.recorder.is_empty()).then(|| ms(median(&ours.recorder))),
                "verify_fraction_of_total": format!("{:.4}", verify.as_secs_f64() / total.as_secs_f64()),
            },
        });
        if let Some(first) = ours.steps.first() {
            // Medians per step, over runs that took the same steps.
            let runs: Vec<_> = ours.steps.iter().filter(|r| r.len() == first.len()).collect();
            let (mut rows, mut json_steps) = (Vec::new(), Vec::new());
            for (i, (stage, step)) in first.iter().enumerate() {
                let wall = median(&runs.iter().map(|r| r[i].1.wall_ms).collect::<Vec<_>>());
                let device = median(&runs.iter().map(|r| r[i].1.device_ms).collect::<Vec<_>>());
                rows.push(vec![
                    stage.to_string(),
                    step.step.to_string(),
                    format!("{wall:.2}"),
                    format!("{device:.2}"),
                ]);
                json_steps.push(json!({ "stage": stage, "step": step.step, "wall_ms": format!("{wall:.2}"),
                                        "device_ms": format!("{device:.2}") }));
            }
            println!("{}: provd/{} per step, medians over {} runs", self.circuit, backend.name(), runs.len());
            print_table(&["stage", "step", "wall ms", "device ms"], &rows);
            report["provd"]["steps"] = json!(json_steps);
        }
        if !theirs.is_empty() {
            let b = median(&theirs);
            let ratio = total.as_secs_f64() / b.as_secs_f64();
            rows.push(vec![
                "bellperson".into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
                ms(b),
                "".into(),
                format!("{:.2}", b.as_secs_f64() / total.as_secs_f64()),
            ]);
            report["bellperson"] = json!({ "median_ms": { "total": ms(b) } });
            report["ratio_provd_over_bellperson"] = json!(format!("{ratio:.3}"));
            println!(
                "{} median over {} runs after warm-up; provd/bellperson time ratio = {ratio:.3}",
                self.circuit, self.runs
            );
        }
        let synthesis = match backend.products(key) {
            ProductsPlacement::Cpu => "synthesis by recorded matrices",
            ProductsPlacement::Gpu => {
                "synthesis by recorded matrices (the assignment; a, b, c on the device)"
            }
        };
        if ours.recorder.is_empty() {
            println!(
                "{synthesis}: {} ms (no baseline); recording once: {} ms",
                ms(median(&ours.synth)),
                ms(record)
            );
        } else {
            println!(
                "{synthesis}: {} ms against the recorder's {} ms in the same runs ({:.3}×); recording once: {} ms",
                ms(median(&ours.synth)),
                ms(median(&ours.recorder)),
                median(&ours.synth).as_secs_f64() / median(&ours.recorder).as_secs_f64(),
                ms(record)
            );
        }
        println!(
            "verification before a proof leaves: {} ms a proof ({:.2}% of the proof's time), {} ms once per key to prepare",
            ms(verify),
            100.0 * verify.as_secs_f64() / total.as_secs_f64(),
            ms(prepare)
        );
        print_table(
            &[
                "prover",
                "synth ms",
                "start ms",
                "GPU busy ms",
                "finish ms",
                "total ms",
                "verify ms",
                "speed vs provd",
            ],
            &rows,
        );
        write_json(&self.json, &report)
    }
}

/// bellperson's view of our key (a copy: benchmarks only).
pub fn to_bellperson(key: &ProvingKey) -> bellperson::groth16::Parameters<Bls12> {
    bellperson::groth16::Parameters {
        vk: key.vk.to_bellperson(),
        h: Arc::new(key.h.clone()),
        l: Arc::new(key.l.clone()),
        a: Arc::new(key.a.clone()),
        b_g1: Arc::new(key.b_g1.clone()),
        b_g2: Arc::new(key.b_g2.clone()),
    }
}
