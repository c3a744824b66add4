//! `provd bench porep-shape --sectors N`: N sectors of a PoRep's real shape
//! submitted at once to the real engine (admission by bytes, permits held to
//! the GPU hand-off, the GPU queue, finalize, the gauges), with synthetic C1
//! outputs and a timing key: the one mode of the engine that proves
//! nothing. Its proofs are not verified and do not verify (every line it
//! prints says so); every other part is the service's. It samples the
//! process's RSS (/proc) against what the gauges account for, each buffer
//! class's bytes, and the device's measured busy time, and reports the
//! steady stream's seconds a sector: between the first sector's end and the
//! last's, over the sectors after the first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::filecoin::device_busy_seconds;
use super::{median, print_table};
use crate::backend::Backend;
use crate::circuits::filecoin::{PorepCircuit, WitnessPass};
use crate::groth16::synthesis::{Evaluations, Products};
use crate::groth16::{AbcFrom, Matrices, ProvingKey, SynthesisFn, WitnessCheck};
use crate::pipeline::{Door, Engine, JobSpec, Outcome, PipelineConfig};
use crate::telemetry::labels::{BufferClass, Priority, Stage};
use crate::telemetry::memory::rss_bytes;
use crate::telemetry::metrics::Metrics;

/// Every printed line's warning: what this stream proves is nothing.
const NOT_PROOFS: &str =
    "timing only: synthetic C1 outputs and a timing key, proofs not verified and not proofs";

/// The stream's shape: how many sectors, through how many permits.
pub struct ShapeStream {
    pub sectors: usize,
    pub permits: usize,
    /// The circuit's name in the engine's gauges.
    pub circuit: String,
}

/// What one sample of the gauges saw at its peak.
#[derive(Default)]
struct Peaks {
    rss: u64,
    buffers: [i64; 5],
    buffers_total: i64,
    reserved: i64,
    /// RSS above what the gauges account for (buffers, the key and the
    /// matrices held, and the process before the stream), at its largest.
    unaccounted: i64,
    samples: usize,
}

impl ShapeStream {
    /// Runs the stream on `backends` with `circuit`'s partitions (one C1's
    /// worth, `partitions`, proved `sectors` times over), a, b and c left
    /// to the matrices where the devices compute them; returns its report.
    pub fn run(
        &self,
        backends: Vec<Arc<dyn Backend>>,
        circuit: &PorepCircuit,
        matrices: Arc<Matrices>,
        key: Arc<ProvingKey>,
        partitions: &[Value],
    ) -> anyhow::Result<Value> {
        let metrics = Arc::new(Metrics::new());
        let config = PipelineConfig { partition_permits: self.permits, ..Default::default() };
        let names: Vec<String> = backends.iter().map(|b| b.name().to_string()).collect();
        let engine = Engine::start(config, backends, metrics.clone())?;
        // What the service holds for a circuit it serves: its key and matrices.
        let held = (key.resident_bytes() + matrices.heap_bytes()) as u64;
        let _key = engine.hold_key(&self.circuit, held).context("the key and matrices fit the budget")?;
        let spec = || -> anyhow::Result<JobSpec> {
            let fns = partitions
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    let inner =
                        circuit.partition_by(k, p.clone(), Some(matrices.clone()), WitnessPass::InParts)?;
                    let m = matrices.clone();
                    // The random witness fails a·b = c: checked and timed, not enforced.
                    let f: SynthesisFn = Arc::new(move || {
                        let mut w = inner()?;
                        w.abc = Evaluations::Products(Products::time_only(m.clone()));
                        Ok(w)
                    });
                    Ok(f)
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(JobSpec {
                circuit: self.circuit.clone(),
                priority: Priority::Normal,
                door: Door::InProcess,
                key: key.clone(),
                verifier: None,
                witness_check: WitnessCheck::BySynthesis,
                abc_from: AbcFrom::Matrices,
                partitions: fns,
            })
        };
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let before = rss_bytes() as i64;
        let began = unix_seconds();
        let t = Instant::now();
        let mut waiting =
            (0..self.sectors).map(|_| Ok(engine.submit(spec()?)?)).collect::<anyhow::Result<Vec<_>>>()?;
        eprintln!("{} sectors of {} partitions submitted ({NOT_PROOFS})", self.sectors, partitions.len());
        let (mut ends, mut busy_at_first, mut peaks) = (Vec::new(), 0.0, Peaks::default());
        while !waiting.is_empty() {
            peaks.sample(&metrics, before);
            let mut still = Vec::new();
            for id in waiting {
                let status = engine.status(id).context("a stream job vanished")?;
                match status.outcome {
                    None => still.push(id),
                    Some(Outcome::Succeeded) => {
                        if ends.is_empty() {
                            busy_at_first = device_busy_seconds(&engine, &names);
                        }
                        ends.push(t.elapsed().as_secs_f64());
                        eprintln!(
                            "sector {} of {} ended at {:.1} s",
                            ends.len(),
                            self.sectors,
                            ends[ends.len() - 1]
                        );
                    }
                    Some(other) => anyhow::bail!("a stream sector ended {other:?}: {:?}", status.error),
                }
            }
            waiting = still;
            std::thread::sleep(Duration::from_millis(50));
        }
        let busy_between = device_busy_seconds(&engine, &names) - busy_at_first;
        // The window on the wall clock, so that samples taken outside the
        // process (nvidia-smi's utilisation) can be cut to the stream.
        let window = json!({
            "began_unix_s": began,
            "first_end_unix_s": began + ends[0],
            "last_end_unix_s": began + ends[ends.len() - 1],
        });
        let (first, last) = (ends[0], ends[ends.len() - 1]);
        let per_sector = (ends.len() > 1).then(|| (last - first) / (ends.len() - 1) as f64);
        let busy_fraction = per_sector.map(|_| busy_between / (last - first).max(1e-9));
        let stage = |s: Stage| {
            let h = metrics.stage_duration.with_label_values(&[&self.circuit, s.name()]);
            h.get_sample_sum() / (h.get_sample_count().max(1) as f64)
        };
        let gib = |b: f64| b / (1u64 << 30) as f64;
        println!("the engine, {} sectors at once, {} permits ({NOT_PROOFS}):", self.sectors, self.permits);
        let mut rows = vec![
            vec![
                "s a sector, steady stream".into(),
                per_sector.map_or("(one sector)".into(), |s| format!("{s:.2}")),
            ],
            vec!["first sector ended at, s".into(), format!("{first:.2}")],
            vec![
                "device busy between the first and last end".into(),
                busy_fraction.map_or(String::new(), |b| format!("{:.1}%", b * 100.0)),
            ],
            vec!["peak RSS (/proc, sampled), GiB".into(), format!("{:.2}", gib(peaks.rss as f64))],
            vec![
                "peak of the buffer gauges together, GiB".into(),
                format!("{:.2}", gib(peaks.buffers_total as f64)),
            ],
            vec!["peak reserved by admission, GiB".into(), format!("{:.2}", gib(peaks.reserved as f64))],
            vec![
                "RSS above what the gauges account for, at most, GiB".into(),
                format!("{:.2}", gib(peaks.unaccounted as f64)),
            ],
            vec![
                "memory budget / limit, GiB".into(),
                format!(
                    "{:.2} / {:.2}",
                    gib(metrics.memory_budget_bytes.get() as f64),
                    gib(metrics.memory_limit_bytes.get() as f64)
                ),
            ],
        ];
        for (i, class) in BufferClass::ALL.iter().enumerate() {
            rows.push(vec![
                format!("peak {} buffers, GiB", class.name()),
                format!("{:.2}", gib(peaks.buffers[i] as f64)),
            ]);
        }
        for s in Stage::IN_PIPELINE {
            rows.push(vec![format!("mean {} s", s.name()), format!("{:.2}", stage(s))]);
        }
        print_table(&["what", "measured"], &rows);
        Ok(json!({
            "timing_only": NOT_PROOFS,
            "sectors": self.sectors,
            "partitions_a_sector": partitions.len(),
            "permits": self.permits,
            "ends_s": ends,
            "wall_clock": window,
            "seconds_a_sector": per_sector,
            "median_gap_s": (ends.len() > 1).then(|| median(&ends.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>())),
            "device_busy_fraction": busy_fraction,
            "peak_rss_bytes": peaks.rss,
            "peak_buffer_bytes": BufferClass::ALL.iter().zip(peaks.buffers).map(|(c, b)| (c.name(), b)).collect::<std::collections::BTreeMap<_, _>>(),
            "peak_buffers_total_bytes": peaks.buffers_total,
            "peak_reserved_bytes": peaks.reserved,
            "max_unaccounted_rss_bytes": peaks.unaccounted,
            "samples": peaks.samples,
            "memory_budget_bytes": metrics.memory_budget_bytes.get(),
            "memory_limit_bytes": metrics.memory_limit_bytes.get(),
            "mean_stage_s": Stage::IN_PIPELINE.iter().map(|s| (s.name(), stage(*s))).collect::<std::collections::BTreeMap<_, _>>(),
        }))
    }
}

/// Seconds since the Unix epoch, now.
fn unix_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Peaks {
    /// One sample: the gauges now, against the process's RSS above
    /// `before` (the process before the stream, its key and matrices in it).
    fn sample(&mut self, m: &Metrics, before: i64) {
        let rss = rss_bytes();
        let mut total = 0;
        for (i, class) in BufferClass::ALL.iter().enumerate() {
            let b = m.buffer_bytes.with_label_values(&[class.name()]).get();
            self.buffers[i] = self.buffers[i].max(b);
            total += b;
        }
        self.rss = self.rss.max(rss);
        self.buffers_total = self.buffers_total.max(total);
        self.reserved = self.reserved.max(m.memory_reserved_bytes.get());
        self.unaccounted = self.unaccounted.max(rss as i64 - before - total);
        self.samples += 1;
    }
}
