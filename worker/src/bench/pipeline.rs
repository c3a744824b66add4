//! `provd bench pipeline`: many jobs through the engine at once. Reports
//! throughput, how busy each stage was, and the peak buffer gauges.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{environment, print_table, write_json, HostUsage};
use crate::backend::Backend;
use crate::circuits::Builtin;
use crate::groth16::{Matrices, ProvingKey};
use crate::pipeline::{Engine, JobSpec, Outcome, PipelineConfig, SynthesisFn};
use crate::telemetry::Metrics;

pub struct PipelineBench {
    pub circuit: Builtin,
    pub jobs: usize,
    pub partitions: usize,
    pub config: PipelineConfig,
    pub json: PathBuf,
    /// A soak: sample RSS, device memory and the gauges this often, and
    /// report whether they stayed flat after warm-up.
    pub sample_every: Option<Duration>,
    /// The GPUs behind the backends, for their memory in the samples.
    pub gpus: Vec<Arc<provd_kernels::Gpu>>,
}

/// A partition's synthesis as the service's bench kind does it: the
/// assignment over matrices recorded once, with a, b and c left for the
/// engine to compute where the backends say (on the device, or at the end of
/// synthesis on the host's cores).
pub(super) fn partition(matrices: &Arc<Matrices>, circuit: Builtin, seed: u64) -> SynthesisFn {
    let m = matrices.clone();
    Arc::new(move || m.assign(circuit.circuit(Some(seed))))
}

/// One sample of a soak: what a leak would make grow.
#[derive(Clone, Debug, serde::Serialize)]
struct Sample {
    seconds: f64,
    /// Partitions ended so far.
    proofs: u64,
    rss_bytes: u64,
    /// Device memory in use, summed over the GPUs.
    device_used_bytes: u64,
    reserved_bytes: i64,
    buffers_in_flight: i64,
    buffer_bytes: i64,
}

impl Sample {
    fn take(t0: Instant, engine: &Engine, gpus: &[Arc<provd_kernels::Gpu>]) -> Self {
        let m = engine.metrics();
        let ledger = engine.ledger();
        Sample {
            seconds: t0.elapsed().as_secs_f64(),
            proofs: m.partitions_ended(None),
            rss_bytes: crate::telemetry::memory::rss_bytes(),
            device_used_bytes: gpus
                .iter()
                .filter_map(|g| g.memory().ok())
                .map(|(free, all)| all.saturating_sub(free) as u64)
                .sum(),
            reserved_bytes: m.memory_reserved_bytes.get(),
            buffers_in_flight: ledger.counts().total(),
            buffer_bytes: ledger.bytes().total(),
        }
    }
}

/// How far RSS and device memory moved over the samples after warm-up (the
/// first tenth of the proofs) while proofs were still running (the final
/// sample, once every buffer is freed, is reported apart): (min, max) of each.
fn drift(samples: &[Sample], proofs: usize) -> Option<((u64, u64), (u64, u64))> {
    let running = |s: &&Sample| (proofs / 10..proofs).contains(&(s.proofs as usize));
    let warm: Vec<&Sample> = samples.iter().filter(running).collect();
    let range = |f: &dyn Fn(&Sample) -> u64| {
        Some((warm.iter().map(|s| f(s)).min()?, warm.iter().map(|s| f(s)).max()?))
    };
    Some((range(&|s| s.rss_bytes)?, range(&|s| s.device_used_bytes)?))
}

impl PipelineBench {
    /// Runs the jobs on `backends` (one worker each, sharing the GPU queue).
    pub fn run(&self, backends: Vec<Arc<dyn Backend>>, key: Arc<ProvingKey>) -> anyhow::Result<()> {
        let metrics = Arc::new(Metrics::new());
        let engine = Engine::start(self.config.clone(), backends.clone(), metrics.clone())?;
        let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
        let devices = names.len() as f64;
        // where a, b and c were set to be computed when the run began
        let products: Vec<String> =
            backends.iter().map(|b| format!("{:?}", b.products(&key)).to_lowercase()).collect();
        // The devices' own busy time (CUDA events; zero on the CPU) and the
        // worker threads' time in prove_start (host work included), summed.
        let sum =
            |v: &prometheus::CounterVec| names.iter().map(|n| v.with_label_values(&[n]).get()).sum::<f64>();
        let gpu_busy = || sum(&metrics.gpu_busy_seconds);
        let thread_busy = || sum(&metrics.prove_start_thread_seconds);
        let start = Instant::now();
        let usage_start = HostUsage::now();
        // Every proof is checked before it leaves, as `provd serve` does by default.
        let verifier = Arc::new(crate::groth16::Verifier::new(&key.vk));
        let matrices = Arc::new(Matrices::record(self.circuit.circuit(None))?);
        let mut ids = Vec::new();
        for j in 0..self.jobs {
            let partitions = (0..self.partitions)
                .map(|p| partition(&matrices, self.circuit, (j * self.partitions + p) as u64))
                .collect();
            ids.push(engine.submit(JobSpec {
                door: crate::pipeline::Door::InProcess,
                circuit: self.circuit.to_string(),
                priority: crate::pipeline::Priority::Normal,
                key: key.clone(),
                verifier: Some(verifier.clone()),
                witness_check: crate::groth16::WitnessCheck::BySynthesis,
                abc_from: crate::groth16::AbcFrom::Matrices,
                partitions,
            })?);
        }
        // Sample the device's busy counter while the queue in front of it is
        // never empty (the steady state), to see whether the GPU ever waits.
        let (mut steady_t, mut steady_busy) = (0.0, 0.0);
        let mut last: Option<(Instant, f64)> = None;
        let mut samples = Vec::new();
        let mut next_sample = start;
        loop {
            if let Some(every) = self.sample_every {
                if Instant::now() >= next_sample {
                    samples.push(Sample::take(start, &engine, &self.gpus));
                    next_sample += every;
                }
            }
            let finished = ids.iter().all(|id| engine.status(*id).is_some_and(|s| s.outcome.is_some()));
            if finished {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            let now = (Instant::now(), gpu_busy());
            let queued = metrics.gpu_queue_depth.get() > 0;
            if let (Some(prev), true) = (last, queued) {
                steady_t += now.0.duration_since(prev.0).as_secs_f64();
                steady_busy += now.1 - prev.1;
            }
            last = queued.then_some(now);
        }
        let wall = start.elapsed().as_secs_f64();
        // The whole process's CPU time over the run: synthesis, copies,
        // verification and the rest, on every core.
        let host_cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let usage = usage_start.zip(HostUsage::now()).map(|(a, b)| b.since(a));
        let host_busy = usage.map(|u| u.cpu_seconds / wall);
        if self.sample_every.is_some() {
            samples.push(Sample::take(start, &engine, &self.gpus));
        }
        let mut synth = 0.0;
        let mut finish = 0.0;
        for id in &ids {
            let st = engine.wait(*id, None).expect("job exists");
            anyhow::ensure!(
                st.outcome == Some(Outcome::Succeeded),
                "job {id} ended {:?}: {:?}",
                st.outcome,
                st.error
            );
            for p in &st.partitions {
                synth += p.times.synthesis.unwrap_or(0.0);
                finish += p.times.prove_finish.unwrap_or(0.0);
            }
        }
        let proofs = self.jobs * self.partitions;
        let synth_threads = self.config.synthesis_threads() as f64;
        let busy = [
            ("synthesis", synth / (synth_threads * wall)),
            ("prove_start thread (per device)", thread_busy() / (devices * wall)),
            ("GPU device (CUDA events, per device)", gpu_busy() / (devices * wall)),
            (
                "GPU device, steady queue",
                if steady_t > 0.0 { steady_busy / (devices * steady_t) } else { f64::NAN },
            ),
            ("finalize", finish / (self.config.finalize_threads as f64 * wall)),
        ];
        let per_device: Vec<(String, f64)> = names
            .iter()
            .map(|n| (n.to_string(), metrics.gpu_busy_seconds.with_label_values(&[n]).get() / wall))
            .collect();
        let peaks = engine.ledger().peaks();
        println!(
            "{} × {} partitions of {} on {}: {proofs} proofs in {wall:.2} s = {:.2} proofs/s",
            self.jobs,
            self.partitions,
            self.circuit,
            names.join(", "),
            proofs as f64 / wall
        );
        if let Some(cores) = host_busy {
            println!(
                "host: {cores:.1} of {host_cores} cores busy on average ({:.1}%)",
                cores / host_cores as f64 * 100.0
            );
        }
        if let Some(k) = usage {
            let per = |n: u64| n as f64 / proofs as f64;
            println!(
                "host: {:.0} minor and {:.1} major page faults, {:.0} voluntary and {:.0} involuntary context switches a proof",
                per(k.minor_faults),
                per(k.major_faults),
                per(k.voluntary_switches),
                per(k.involuntary_switches)
            );
        }
        if per_device.len() > 1 {
            for (n, b) in &per_device {
                println!("  {n}: device busy {:.1}%", b * 100.0);
            }
        }
        print_table(
            &["stage", "busy"],
            &busy.iter().map(|(s, b)| vec![s.to_string(), format!("{:.1}%", b * 100.0)]).collect::<Vec<_>>(),
        );
        println!(
            "peak buffers: synth {} abc {} aux {} density {} pending {}; peak reserved {:.1} MiB of {:.1} MiB",
            peaks.synth,
            peaks.abc,
            peaks.aux,
            peaks.density,
            peaks.pending,
            engine.budget().peak() as f64 / 1048576.0,
            engine.budget().total() as f64 / 1048576.0
        );
        let soak = self.sample_every.map(|_| {
            let mib = |b: u64| format!("{:.1}", b as f64 / 1048576.0);
            let step = samples.len().div_ceil(12).max(1);
            let rows: Vec<Vec<String>> = samples
                .iter()
                .enumerate()
                .filter(|(i, _)| i % step == 0 || *i + 1 == samples.len())
                .map(|(_, s)| {
                    vec![
                        format!("{:.1}", s.seconds),
                        s.proofs.to_string(),
                        mib(s.rss_bytes),
                        mib(s.device_used_bytes),
                        mib(s.reserved_bytes.max(0) as u64),
                        s.buffers_in_flight.to_string(),
                    ]
                })
                .collect();
            print_table(&["s", "proofs", "RSS MiB", "device MiB", "reserved MiB", "buffers"], &rows);
            let last = samples.last().expect("a final sample");
            let flat = drift(&samples, proofs);
            if let Some(((r0, r1), (d0, d1))) = flat {
                println!(
                    "after warm-up (from {} proofs), while proving: RSS {}–{} MiB (spread {}), device {}–{} MiB (spread {}); at the end: RSS {} MiB, device {} MiB, {} buffers, {} buffer bytes, {} bytes reserved",
                    proofs / 10, mib(r0), mib(r1), mib(r1 - r0), mib(d0), mib(d1), mib(d1 - d0),
                    mib(last.rss_bytes), mib(last.device_used_bytes),
                    last.buffers_in_flight, last.buffer_bytes, last.reserved_bytes
                );
            }
            json!({
                "samples": samples,
                "after_warm_up": flat.map(|((r0, r1), (d0, d1))| json!({
                    "rss_min": r0, "rss_max": r1, "device_min": d0, "device_max": d1,
                })),
            })
        });
        let report = json!({
            "soak": soak,
            "bench": "pipeline", "env": environment(), "circuit": self.circuit.to_string(), "backend": names.join(","), "devices": per_device.iter().map(|(n, b)| json!({"name": n, "busy": b})).collect::<Vec<_>>(),
            "jobs": self.jobs, "partitions": self.partitions, "wall_seconds": wall, "proofs_per_second": proofs as f64 / wall,
            "busy": busy.iter().map(|(s, b)| (s.to_string(), json!(b))).collect::<serde_json::Map<_, _>>(),
            "host_cores": host_cores, "host_cores_busy": host_busy, "host_usage": usage.map(|u| json!(u)),
            "peak_buffers": peaks, "peak_reserved_bytes": engine.budget().peak(), "budget_bytes": engine.budget().total(),
            "config": {
                "partition_permits": self.config.partition_permits, "gpu_queue_capacity": self.config.gpu_queue_capacity,
                "synthesis_threads": self.config.synthesis_threads(), "finalize_threads": self.config.finalize_threads,
                "products": products,
            },
        });
        write_json(&self.json, &report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's partitions leave a, b and c to the backends' placement,
    /// as the service's do (computing them in the partition would put them
    /// on the host whatever `--products` says).
    #[test]
    fn partitions_leave_the_products_to_the_engine() {
        let circuit: Builtin = "bench-10".parse().unwrap();
        let matrices = Arc::new(Matrices::record(circuit.circuit(None)).unwrap());
        let w = partition(&matrices, circuit, 7)().unwrap();
        assert!(matches!(w.abc, crate::groth16::synthesis::Evaluations::Products(_)));
        assert_eq!(w.abc_host_bytes(), 0);
    }

    fn sample(proofs: u64, rss_mib: u64) -> Sample {
        Sample {
            seconds: proofs as f64,
            proofs,
            rss_bytes: rss_mib << 20,
            device_used_bytes: 1 << 30,
            reserved_bytes: 0,
            buffers_in_flight: 0,
            buffer_bytes: 0,
        }
    }

    /// The spread covers the samples after warm-up taken while proving: not
    /// the warm-up's, nor the final one after every buffer is freed.
    #[test]
    fn drift_spans_the_steady_samples_only() {
        let samples = [sample(5, 400), sample(20, 1500), sample(60, 1600), sample(100, 800)];
        let ((r0, r1), (d0, d1)) = drift(&samples, 100).unwrap();
        assert_eq!((r0 >> 20, r1 >> 20), (1500, 1600));
        assert_eq!((d0, d1), (1 << 30, 1 << 30));
        assert!(drift(&samples[..1], 100).is_none(), "no sample after warm-up");
    }
}
