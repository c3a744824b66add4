//! `provd bench lane`: how long a critical job takes when it arrives into a
//! saturated stream of normal work, beside the same job on an idle worker
//! and the same job sent as normal (first come first served, as before
//! priorities: the whole queue ahead of it), all in one run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::pipeline::partition;
use super::{environment, median, print_table, write_json};
use crate::backend::Backend;
use crate::circuits::Builtin;
use crate::groth16::{Matrices, ProvingKey, Verifier, WitnessCheck};
use crate::pipeline::{Engine, JobId, JobSpec, Outcome, PipelineConfig, Priority, StageTimes};
use crate::telemetry::Metrics;

pub struct LaneBench {
    /// The urgent job (one partition a job, as a WinningPoSt).
    pub critical: Urgent,
    /// The stream's circuit (larger partitions, as sealing's).
    pub stream: Builtin,
    /// Urgent jobs timed in each scenario.
    pub runs: usize,
    pub config: PipelineConfig,
    pub json: PathBuf,
}

/// The urgent job as the bench submits it: a built-in circuit's
/// ([`Urgent::bench`]) or a Filecoin kind's
/// ([`super::vanilla::VanillaBench::urgent`]).
pub struct Urgent {
    pub name: String,
    pub key: Arc<ProvingKey>,
    /// One job of the circuit at a priority (the seed varies its witness
    /// where the circuit can).
    #[allow(clippy::type_complexity)]
    pub job: Box<dyn Fn(Priority, u64) -> anyhow::Result<JobSpec> + Send + Sync>,
}

impl Urgent {
    /// A built-in circuit's job, synthesized by its recorded matrices.
    pub fn bench(circuit: Builtin, key: Arc<ProvingKey>) -> anyhow::Result<Self> {
        let served = Served::new(circuit, key.clone())?;
        Ok(Self { name: circuit.to_string(), key, job: Box::new(move |p, seed| Ok(served.job(p, seed))) })
    }
}

/// A circuit as the bench submits it: its key, matrices and verifier.
struct Served {
    circuit: Builtin,
    key: Arc<ProvingKey>,
    matrices: Arc<Matrices>,
    verifier: Arc<Verifier>,
}

impl Served {
    fn new(circuit: Builtin, key: Arc<ProvingKey>) -> anyhow::Result<Self> {
        let matrices = Arc::new(Matrices::record(circuit.circuit(None))?);
        let verifier = Arc::new(Verifier::new(&key.vk));
        Ok(Self { circuit, key, matrices, verifier })
    }

    /// A job of one partition, every proof checked as `provd serve` does.
    fn job(&self, priority: Priority, seed: u64) -> JobSpec {
        JobSpec {
            circuit: self.circuit.to_string(),
            priority,
            door: crate::pipeline::Door::InProcess,
            key: self.key.clone(),
            verifier: Some(self.verifier.clone()),
            witness_check: WitnessCheck::BySynthesis,
            abc_from: crate::groth16::AbcFrom::Matrices,
            partitions: vec![partition(&self.matrices, self.circuit, seed)],
        }
    }
}

/// The urgent jobs of one scenario: each one's seconds from acceptance to
/// its end, and where its partition spent them.
#[derive(Default)]
struct Timed {
    total: Vec<f64>,
    stages: Vec<StageTimes>,
}

impl Timed {
    /// Median seconds of each stage, by name (0 where a stage was not timed:
    /// `gpu_device` on the CPU).
    fn breakdown(&self) -> Vec<(&'static str, f64)> {
        let stage = |f: fn(&StageTimes) -> Option<f64>| {
            median(&self.stages.iter().map(|t| f(t).unwrap_or(0.0)).collect::<Vec<_>>())
        };
        vec![
            ("synthesis", stage(|t| t.synthesis)),
            ("gpu_queue", stage(|t| t.gpu_queue)),
            ("prove_start", stage(|t| t.prove_start)),
            ("gpu_device", stage(|t| t.gpu_device)),
            ("prove_finish", stage(|t| t.prove_finish)),
            ("verify", stage(|t| t.verify)),
        ]
    }
}

/// Times `runs` urgent jobs, sent one after another (each once the last has
/// ended) at `priority`.
fn time_urgent(engine: &Engine, urgent: &Urgent, priority: Priority, runs: usize) -> anyhow::Result<Timed> {
    let mut timed = Timed::default();
    for r in 0..runs {
        let id = engine.submit((urgent.job)(priority, 1_000_000 + r as u64)?)?;
        let st = engine.wait(id, None).expect("a job it accepted");
        anyhow::ensure!(st.outcome == Some(Outcome::Succeeded), "an urgent job failed: {:?}", st.error);
        timed.total.push(st.elapsed_seconds);
        timed.stages.push(st.partitions[0].times.clone());
    }
    Ok(timed)
}

/// Keeps `backlog` stream partitions waiting for admission until `stop`,
/// so that every stage in front of the device stays full.
fn feed(engine: &Engine, stream: &Served, backlog: usize, stop: &AtomicBool) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::new();
    let mut seed = 0;
    while !stop.load(Ordering::Acquire) {
        while engine.queued_partitions() < backlog {
            ids.push(engine.submit(stream.job(Priority::Normal, seed))?);
            seed += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(ids)
}

impl LaneBench {
    pub fn run(&self, backends: Vec<Arc<dyn Backend>>, stream_key: Arc<ProvingKey>) -> anyhow::Result<()> {
        anyhow::ensure!(self.config.critical_permits > 0, "the lane needs pipeline.critical_permits > 0");
        let names: Vec<String> = backends.iter().map(|b| b.name().to_string()).collect();
        let engine = Engine::start(self.config.clone(), backends, Arc::new(Metrics::new()))?;
        let urgent = &self.critical;
        let stream = Served::new(self.stream, stream_key)?;
        engine.keep_for_critical(engine.footprint(&urgent.key).total());
        // Warm-up: each circuit's first proof (key uploads, kernel loads).
        for id in [
            engine.submit((urgent.job)(Priority::Critical, 0)?)?,
            engine.submit(stream.job(Priority::Normal, 0))?,
        ] {
            engine.wait(id, None);
        }
        let one_stream = {
            let id = engine.submit(stream.job(Priority::Normal, 1))?;
            engine.wait(id, None).expect("accepted").elapsed_seconds
        };
        let idle = time_urgent(&engine, urgent, Priority::Critical, self.runs)?;
        // Saturated: every permit, the GPU queue and the devices busy with
        // the stream, and more of it waiting for admission.
        let backlog = self.config.partition_permits + self.config.gpu_queue_capacity + 4;
        let stop = AtomicBool::new(false);
        let (critical, fcfs, streamed) = std::thread::scope(|scope| -> anyhow::Result<_> {
            let feeder = scope.spawn(|| feed(&engine, &stream, backlog, &stop));
            let m = engine.metrics();
            while m.gpu_queue_depth.get() < self.config.gpu_queue_capacity as i64 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let critical = time_urgent(&engine, urgent, Priority::Critical, self.runs);
            // As before priorities: the same job queued behind the stream.
            let fcfs = time_urgent(&engine, urgent, Priority::Normal, self.runs.min(3));
            stop.store(true, Ordering::Release);
            let streamed = feeder.join().expect("the feeder thread")?;
            Ok((critical?, fcfs?, streamed))
        })?;
        for id in &streamed {
            engine.cancel(*id);
        }
        for id in &streamed {
            engine.wait(*id, None);
        }
        let idle_median = median(&idle.total);
        let row = |name: &str, t: &Timed| {
            let m = median(&t.total);
            let max = t.total.iter().copied().fold(0.0, f64::max);
            let mut row = vec![name.to_string(), t.total.len().to_string(), format!("{:.1}", m * 1e3)];
            row.extend([format!("{:.1}", max * 1e3), format!("{:.2}", m / idle_median)]);
            row.extend(t.breakdown().into_iter().map(|(_, s)| format!("{:.1}", s * 1e3)));
            row
        };
        println!(
            "\n{} (one partition a job) arriving into a stream of {} partitions on {} ({:.1} ms a stream partition \
             alone); stage columns are the urgent partition's median ms:",
            self.critical.name,
            self.stream,
            names.join(","),
            one_stream * 1e3
        );
        let mut header = vec!["urgent job", "runs", "median ms", "max ms", "× idle"];
        header.extend(idle.breakdown().into_iter().map(|(k, _)| k));
        print_table(
            &header,
            &[
                row("idle worker", &idle),
                row("critical, saturated stream", &critical),
                row("normal (first come first served), saturated", &fcfs),
            ],
        );
        let stages = |t: &Timed| -> serde_json::Map<String, serde_json::Value> {
            t.breakdown().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
        };
        let report = json!({
            "bench": "lane",
            "env": environment(),
            "backend": names.join(","),
            "critical_circuit": self.critical.name,
            "stream_circuit": self.stream.to_string(),
            "stream_partition_alone_seconds": one_stream,
            "config": { "partition_permits": self.config.partition_permits,
                        "gpu_queue_capacity": self.config.gpu_queue_capacity,
                        "critical_permits": self.config.critical_permits, "backlog": backlog },
            "idle_seconds": idle.total,
            "critical_saturated_seconds": critical.total,
            "fcfs_saturated_seconds": fcfs.total,
            "median_stage_seconds": { "idle": stages(&idle), "critical_saturated": stages(&critical),
                                      "fcfs_saturated": stages(&fcfs) },
            "critical_over_idle": median(&critical.total) / idle_median,
            "fcfs_over_idle": median(&fcfs.total) / idle_median,
        });
        write_json(&self.json, &report)
    }
}
