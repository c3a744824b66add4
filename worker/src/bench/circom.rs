//! `provd bench circom`: a circom circuit's proof from its zkey and witness,
//! provd against `snarkjs groth16 prove` on the same files, interleaved so
//! that both see the same noise. provd is timed twice: with the key resident
//! (what the service does for every proof) and as the whole `provd groth16
//! prove` command (reading and checking the zkey included), the figure to
//! hold against snarkjs's command, which reads the zkey every time too.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{environment, median, ms, print_table, write_json};
use crate::backend::Backend;
use crate::circuits::circom::{self, Witness};
use crate::groth16::{Blinding, Verifier};

pub struct CircomBench {
    pub zkey: PathBuf,
    pub wtns: PathBuf,
    pub runs: usize,
    /// `snarkjs` to run beside provd (its CLI), if any.
    pub snarkjs: Option<PathBuf>,
    /// The `--backend` the whole-command runs get (the backend's own choice).
    pub backend_arg: &'static str,
    pub json: PathBuf,
}

#[derive(Default)]
struct Samples {
    synth: Vec<Duration>,
    start: Vec<Duration>,
    device: Vec<Duration>,
    finish: Vec<Duration>,
    resident: Vec<Duration>,
    command: Vec<Duration>,
    snarkjs: Vec<Duration>,
}

/// Runs a command, returning its wall time; fails with its output.
fn timed(cmd: &mut Command) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let elapsed = t.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(elapsed)
}

impl CircomBench {
    pub fn run(&self, backend: &dyn Backend) -> anyhow::Result<()> {
        let t = Instant::now();
        let (key, circuit) = circom::read_zkey(&self.zkey, crate::groth16::PointCheck::OnCurve)
            .with_context(|| format!("reading {}", self.zkey.display()))?;
        let load = t.elapsed();
        let bytes = std::fs::read(&self.wtns).with_context(|| format!("reading {}", self.wtns.display()))?;
        let witness = Witness::parse(&bytes, circuit.witness_len())?;
        let verifier = Verifier::new(&key.vk);
        let out = tempdir()?;
        let (proof, public) = (out.join("proof.json"), out.join("public.json"));
        let exe = std::env::current_exe().context("provd's own path")?;
        let mut s = Samples::default();
        for i in 0..=self.runs {
            let t = Instant::now();
            let w = circuit.synthesize(&witness)?;
            let t_synth = t.elapsed();
            let inputs = w.public_inputs().to_vec();
            let pending = backend.prove_start(&key, w)?;
            let t_start = t.elapsed();
            let on_device = pending.device_seconds;
            let finished = backend.prove_finish(&key, pending, Blinding::random(&mut rand::rngs::OsRng))?;
            let t_total = t.elapsed();
            verifier.verify(&finished.proof, &inputs).context("provd's proof did not verify")?;
            let device = [on_device, finished.device_seconds].into_iter().flatten().reduce(|a, b| a + b);
            let command = timed(
                Command::new(&exe)
                    .args(["groth16", "prove"])
                    .args([&self.zkey, &self.wtns, &proof, &public])
                    .args(["--backend", self.backend_arg]),
            )?;
            let theirs = match &self.snarkjs {
                Some(snarkjs) => Some(timed(
                    Command::new(snarkjs)
                        .args(["groth16", "prove"])
                        .args([&self.zkey, &self.wtns, &proof, &public]),
                )?),
                None => None,
            };
            if i > 0 {
                s.synth.push(t_synth);
                s.start.push(t_start - t_synth);
                s.device.extend(device.map(Duration::from_secs_f64));
                s.finish.push(t_total - t_start);
                s.resident.push(t_total);
                s.command.push(command);
                s.snarkjs.extend(theirs);
            }
        }
        let _ = std::fs::remove_dir_all(&out);
        let (resident, command) = (median(&s.resident), median(&s.command));
        let n = key.domain_size();
        let mut rows = vec![
            vec![
                format!("provd/{} (key resident)", backend.name()),
                ms(median(&s.synth)),
                ms(median(&s.start)),
                if s.device.is_empty() { String::new() } else { ms(median(&s.device)) },
                ms(median(&s.finish)),
                ms(resident),
                String::new(),
            ],
            vec![
                format!("provd groth16 prove ({})", self.backend_arg),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                ms(command),
                "1.00".into(),
            ],
        ];
        let mut report = json!({
            "bench": "circom",
            "zkey": self.zkey.display().to_string(),
            "domain_log2": n.trailing_zeros(),
            "constraints": circuit.constraints(),
            "signals": circuit.witness_len(),
            "runs": self.runs,
            "env": environment(),
            "provd": {
                "backend": backend.name(),
                "zkey_load_ms": ms(load),
                "median_ms": {
                    "synthesis": ms(median(&s.synth)), "prove_start": ms(median(&s.start)),
                    "gpu_device": (!s.device.is_empty()).then(|| ms(median(&s.device))),
                    "prove_finish": ms(median(&s.finish)), "total_key_resident": ms(resident),
                    "command": ms(command),
                },
            },
        });
        if !s.snarkjs.is_empty() {
            let theirs = median(&s.snarkjs);
            let ratio = command.as_secs_f64() / theirs.as_secs_f64();
            rows.push(vec![
                "snarkjs groth16 prove".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                ms(theirs),
                format!("{:.2}", theirs.as_secs_f64() / command.as_secs_f64()),
            ]);
            report["snarkjs"] = json!({ "median_ms": { "command": ms(theirs) } });
            report["ratio_provd_command_over_snarkjs"] = json!(format!("{ratio:.3}"));
            report["ratio_provd_resident_over_snarkjs"] =
                json!(format!("{:.3}", resident.as_secs_f64() / theirs.as_secs_f64()));
            println!(
                "2^{} domain, median of {} runs after warm-up; provd/snarkjs time: {ratio:.3} (whole commands), {:.3} (provd's key resident)",
                n.trailing_zeros(),
                self.runs,
                resident.as_secs_f64() / theirs.as_secs_f64()
            );
        }
        println!("zkey read and checked in {} ms", ms(load));
        print_table(
            &["prover", "synth ms", "start ms", "GPU busy ms", "finish ms", "total ms", "time vs provd cmd"],
            &rows,
        );
        write_json(&self.json, &report)
    }
}

fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("provd-bench-circom-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
