//! What the Filecoin benchmarks share: one job of a loaded kind, from its
//! request input, through provd's engine (its gauges, budget and backend),
//! timed and checked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::circuits::CircuitKind;
use crate::pipeline::{Engine, JobSpec, Outcome, Priority};

/// One job's run through the engine.
pub struct JobRun {
    /// From splitting the input to the job's end.
    pub elapsed: Duration,
    /// The backends' measured busy time while it ran (device time on a GPU).
    pub device_seconds: f64,
    /// The partitions' synthesis times, summed.
    pub synthesis_seconds: f64,
    /// The job's result bytes (`result.proof`), as the kind encodes them.
    pub proof: Vec<u8>,
    /// The buffer gauges' and the reservation's peaks while it ran.
    pub peak_buffer_bytes: i64,
    pub peak_reserved_bytes: i64,
}

/// `input` as a job of `kind` at `priority`, split and each partition's
/// synthesis made as `provd serve` makes them, every proof checked by
/// `verifier` (the key's) before the job ends.
pub fn job_spec(
    kind: &dyn CircuitKind,
    circuit: &str,
    input: serde_json::Value,
    priority: Priority,
    verifier: Arc<crate::groth16::Verifier>,
) -> anyhow::Result<JobSpec> {
    let parts = kind.split(input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let partitions = parts
        .into_iter()
        .enumerate()
        .map(|(k, w)| kind.partition(k, w).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(JobSpec {
        door: crate::pipeline::Door::InProcess,
        circuit: circuit.to_string(),
        priority,
        key: kind.key().clone(),
        verifier: Some(verifier),
        witness_check: crate::groth16::WitnessCheck::BySynthesis,
        abc_from: kind.abc_from(),
        partitions,
    })
}

/// Proves `input` as a job of `kind` on `engine` (whose backends are named
/// `backends`), polling the gauges as it runs; fails if the job fails.
pub fn prove_job(
    engine: &Engine,
    backends: &[&str],
    kind: &dyn CircuitKind,
    circuit: &str,
    input: serde_json::Value,
) -> anyhow::Result<JobRun> {
    let metrics = engine.metrics();
    let busy = || device_busy_seconds(engine, backends);
    let t = Instant::now();
    let busy_before = busy();
    let verifier = Arc::new(crate::groth16::Verifier::new(&kind.key().vk));
    let id = engine.submit(job_spec(kind, circuit, input, Priority::Normal, verifier)?)?;
    let (mut peak_buffer_bytes, mut peak_reserved_bytes) = (0i64, 0i64);
    let status = loop {
        let s = engine.status(id).context("the job vanished")?;
        if s.outcome.is_some() {
            break s;
        }
        let bytes: i64 = crate::telemetry::labels::BufferClass::ALL
            .iter()
            .map(|c| metrics.buffer_bytes.with_label_values(&[c.name()]).get())
            .sum();
        peak_buffer_bytes = peak_buffer_bytes.max(bytes);
        peak_reserved_bytes = peak_reserved_bytes.max(metrics.memory_reserved_bytes.get());
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = t.elapsed();
    let proof = job_proof(kind, &status)?;
    Ok(JobRun {
        elapsed,
        device_seconds: busy() - busy_before,
        synthesis_seconds: status.partitions.iter().filter_map(|p| p.times.synthesis).sum(),
        proof,
        peak_buffer_bytes,
        peak_reserved_bytes,
    })
}

/// An ended job's result bytes (`result.proof`) as the kind encodes them;
/// fails if the job did not succeed.
pub fn job_proof(kind: &dyn CircuitKind, status: &crate::pipeline::JobStatus) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(status.outcome == Some(Outcome::Succeeded), "provd's job failed: {:?}", status.error);
    let proofs: Vec<_> = status.partitions.iter().filter_map(|p| p.proof.as_ref()).collect();
    let result = kind.job_result(&proofs).context("the kind gives a job result")?;
    Ok(hex::decode(result["proof"].as_str().context("result.proof in hex")?)?)
}

/// The measured busy seconds of `engine`'s devices named `backends`, so far
/// (device time on a GPU).
pub fn device_busy_seconds(engine: &Engine, backends: &[&str]) -> f64 {
    let metrics = engine.metrics();
    backends.iter().map(|n| metrics.gpu_busy_seconds.with_label_values(&[n]).get()).sum()
}
