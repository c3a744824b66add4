//! `provd bench porep-shape --sectors N`: N sectors of a PoRep's real shape
//! submitted at once to the real engine (admission by bytes, permits held to
//! the GPU hand-off, the GPU queue, finalize, the gauges), with synthetic C1
//! outputs and a timing key: the one mode of the engine that proves
//! nothing. Its proofs are not verified and do not verify (every line it
//! prints says so); every other part is the service's. It samples the
//! process's RSS (/proc) against what the gauges account for and what
//! admission reserved, each buffer class's bytes, the device's measured
//! busy time and the host's CPU a partition, and reports the steady
//! stream's seconds a sector: from the first partition's end to the last's,
//! over the partitions after the first, times a sector's partitions
//! (the sectors go in at once and their partitions interleave, so sector
//! ends bunch at the stream's end and their gaps say nothing of its pace),
//! beside the whole stream's (submission to the last end, over the sectors).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::filecoin::device_busy_seconds;
use super::{print_table, HostUsage};
use crate::backend::Backend;
use crate::circuits::filecoin::{PorepCircuit, WitnessPass};
use crate::groth16::synthesis::{Evaluations, Products};
use crate::groth16::{AbcFrom, Matrices, ProvingKey, SynthesisFn, WitnessCheck};
use crate::pipeline::{Door, Engine, JobSpec, Outcome, PipelineConfig};
use crate::telemetry::labels::{BufferClass, Priority, Stage, WaitQueue};
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
    /// RSS above what admission reserved for the partitions (and the
    /// process before the stream), at its largest.
    over_reserved: i64,
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
        let backends_in_flight = backends.iter().map(|b| b.partitions_in_flight().count()).max();
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
        let usage_before = HostUsage::now();
        let began = unix_seconds();
        let t = Instant::now();
        let mut waiting = (0..self.sectors)
            .map(|sector| Ok((sector, engine.submit(spec()?)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        eprintln!("{} sectors of {} partitions submitted ({NOT_PROOFS})", self.sectors, partitions.len());
        let (mut ends, mut busy_at_first, mut peaks) = (Vec::new(), 0.0, Peaks::default());
        // When each partition was first seen done (polled every 50 ms).
        let (mut done, mut any_done) = (vec![vec![None::<f64>; partitions.len()]; self.sectors], false);
        while !waiting.is_empty() {
            peaks.sample(&metrics, before, held as i64);
            let mut still = Vec::new();
            for (sector, id) in waiting {
                let status = engine.status(id).context("a stream job vanished")?;
                for (end, p) in done[sector].iter_mut().zip(&status.partitions) {
                    if end.is_none() && p.stage == Stage::Done {
                        if !any_done {
                            any_done = true;
                            busy_at_first = device_busy_seconds(&engine, &names);
                        }
                        *end = Some(t.elapsed().as_secs_f64());
                    }
                }
                match status.outcome {
                    None => still.push((sector, id)),
                    Some(Outcome::Succeeded) => {
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
        // The whole process's CPU over the stream, a partition: its
        // witness's CPU and everything else the host did for it (the
        // engine, the copies, the assembly), so an upper bound on the
        // witness's own.
        let proved = (self.sectors * partitions.len()) as f64;
        let cpu_a_partition =
            HostUsage::now().zip(usage_before).map(|(now, then)| now.since(then).cpu_seconds / proved);
        let mut partition_ends: Vec<f64> = done.into_iter().flatten().flatten().collect();
        partition_ends.sort_by(f64::total_cmp);
        let (first, last) = (partition_ends[0], partition_ends[partition_ends.len() - 1]);
        // The window on the wall clock, so that samples taken outside the
        // process (nvidia-smi's utilisation) can be cut to the stream.
        let window = json!({
            "began_unix_s": began,
            "first_partition_end_unix_s": began + first,
            "last_end_unix_s": began + ends[ends.len() - 1],
        });
        let steady = (partition_ends.len() > 1).then(|| {
            let per_partition = (last - first) / (partition_ends.len() - 1) as f64;
            (per_partition * partitions.len() as f64, busy_between / (last - first).max(1e-9))
        });
        let whole = ends[ends.len() - 1] / self.sectors as f64;
        let stage = |s: Stage| {
            let h = metrics.stage_duration.with_label_values(&[&self.circuit, s.name()]);
            h.get_sample_sum() / (h.get_sample_count().max(1) as f64)
        };
        // Where partitions waited: `products` is the wait for the memory of
        // the a, b and c the host computes after the witness.
        let wait = |queue: WaitQueue| {
            let h = metrics.partition_wait.with_label_values(&[Priority::Normal.name(), queue.name()]);
            h.get_sample_sum() / (h.get_sample_count().max(1) as f64)
        };
        let gib = |b: f64| b / (1u64 << 30) as f64;
        println!(
            "the engine, {} sectors at once, {} permits, {} partitions in prove_start at once a backend ({NOT_PROOFS}):",
            self.sectors,
            self.permits,
            backends_in_flight.unwrap_or(0)
        );
        let ended: Vec<String> = ends.iter().map(|e| format!("{e:.1}")).collect();
        let mut rows = vec![
            vec![
                "s a sector, steady (first to last partition's end)".into(),
                steady.map_or("(one partition)".into(), |(s, _)| format!("{s:.2}")),
            ],
            vec!["s a sector, whole stream (its wall time / sectors)".into(), format!("{whole:.2}")],
            vec!["first partition ended at, s".into(), format!("{first:.2}")],
            vec!["sectors ended at, s".into(), ended.join(", ")],
            vec![
                "device busy, first to last partition's end".into(),
                steady.map_or(String::new(), |(_, b)| format!("{:.1}%", b * 100.0)),
            ],
            vec![
                "host CPU s a partition (the process's, over the stream)".into(),
                cpu_a_partition.map_or("(getrusage failed)".into(), |c| format!("{c:.2}")),
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
                "RSS above what admission reserved, at most, GiB".into(),
                format!("{:.2}", gib(peaks.over_reserved as f64)),
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
        for q in WaitQueue::ALL {
            rows.push(vec![format!("mean wait in the {} queue, s", q.name()), format!("{:.2}", wait(q))]);
        }
        print_table(&["what", "measured"], &rows);
        Ok(json!({
            "timing_only": NOT_PROOFS,
            "sectors": self.sectors,
            "partitions_a_sector": partitions.len(),
            "permits": self.permits,
            "partitions_in_flight": backends_in_flight,
            "ends_s": ends,
            "partition_ends_s": partition_ends,
            "wall_clock": window,
            "seconds_a_sector": steady.map(|(s, _)| s),
            "seconds_a_sector_whole_stream": whole,
            "device_busy_fraction": steady.map(|(_, b)| b),
            "host_cpu_s_a_partition": cpu_a_partition,
            "peak_rss_bytes": peaks.rss,
            "peak_buffer_bytes": BufferClass::ALL.iter().zip(peaks.buffers).map(|(c, b)| (c.name(), b)).collect::<std::collections::BTreeMap<_, _>>(),
            "peak_buffers_total_bytes": peaks.buffers_total,
            "peak_reserved_bytes": peaks.reserved,
            "max_unaccounted_rss_bytes": peaks.unaccounted,
            "max_rss_over_reserved_bytes": peaks.over_reserved,
            "samples": peaks.samples,
            "memory_budget_bytes": metrics.memory_budget_bytes.get(),
            "memory_limit_bytes": metrics.memory_limit_bytes.get(),
            "mean_stage_s": Stage::IN_PIPELINE.iter().map(|s| (s.name(), stage(*s))).collect::<std::collections::BTreeMap<_, _>>(),
            "mean_wait_s": WaitQueue::ALL.iter().map(|q| (q.name(), wait(*q))).collect::<std::collections::BTreeMap<_, _>>(),
        }))
    }
}

/// Seconds since the Unix epoch, now.
fn unix_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Peaks {
    /// One sample: the gauges now, against the process's RSS above
    /// `before` (the process before the stream, its key and matrices in it,
    /// which admission holds as `held` of what it reserves).
    fn sample(&mut self, m: &Metrics, before: i64, held: i64) {
        let rss = rss_bytes();
        let mut total = 0;
        for (i, class) in BufferClass::ALL.iter().enumerate() {
            let b = m.buffer_bytes.with_label_values(&[class.name()]).get();
            self.buffers[i] = self.buffers[i].max(b);
            total += b;
        }
        self.rss = self.rss.max(rss);
        self.buffers_total = self.buffers_total.max(total);
        let reserved = m.memory_reserved_bytes.get();
        self.reserved = self.reserved.max(reserved);
        self.unaccounted = self.unaccounted.max(rss as i64 - before - total);
        self.over_reserved = self.over_reserved.max(rss as i64 - before - (reserved - held));
        self.samples += 1;
    }
}
