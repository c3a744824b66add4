//! What the live view, /v1/status and /metrics show: snapshots of every
//! gauge at one moment, the recent history of them, and the gauges that are
//! read on demand (GPU memory, key residency) refreshed before a scrape.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Service;
use crate::pipeline::buffers::ClassCounts;
use crate::pipeline::{JobStatus, Outcome};

/// What the live view and /v1/status show at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// Milliseconds since the Unix epoch.
    pub t: u64,
    /// Admitted partitions per stage (synthesis, gpu_queue, prove_start, prove_finish).
    pub stages: BTreeMap<&'static str, i64>,
    pub buffers: ClassCounts,
    pub buffer_bytes: ClassCounts,
    pub reserved_bytes: u64,
    /// The part of `reserved_bytes` held by received witnesses waiting for
    /// (or in) their partitions.
    pub witness_bytes: u64,
    /// The part of `reserved_bytes` the served circuits hold resident (their
    /// proving keys, and what their kinds keep beside them: recorded matrices).
    pub key_bytes: u64,
    pub budget_bytes: u64,
    pub rss_bytes: u64,
    pub gpu_queue_depth: i64,
    pub gpu_queue_capacity: i64,
    pub partitions_waiting: usize,
    /// Partitions waiting, by their job's priority (`low` … `critical`).
    pub priorities: BTreeMap<&'static str, WaitingByPriority>,
    /// The part of the budget that work of every class but critical leaves free.
    pub critical_headroom_bytes: u64,
    pub partitions_completed: u64,
    pub partitions_failed: u64,
    pub jobs_succeeded: u64,
    pub jobs_failed: u64,
    pub jobs_cancelled: u64,
    /// Jobs not yet ended, per circuit served: what the cuzk.v1 door's
    /// `GetStatus` reports per proof kind.
    pub unfinished_jobs: BTreeMap<String, UnfinishedJobs>,
    pub gpus: Vec<GpuMemory>,
    /// In fleet mode: this worker's claims and the fleet's queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSnapshot>,
}

/// Partitions of one priority waiting for admission and for a GPU.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct WaitingByPriority {
    /// Accepted, not yet admitted to synthesis.
    pub queued: usize,
    /// Synthesized, waiting for a GPU worker.
    pub gpu_queue: i64,
}

/// A circuit's jobs that have not ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UnfinishedJobs {
    /// Accepted, no partition started yet.
    pub queued: u32,
    /// At least one partition started.
    pub running: u32,
}

/// A fleet worker's view of the queue, as its heartbeat last read it.
#[derive(Clone, Debug, Serialize)]
pub struct FleetSnapshot {
    pub worker: String,
    /// Partitions this worker holds.
    pub claimed_here: usize,
    /// The fleet's queued and claimed partitions.
    pub queued: u64,
    pub claimed: u64,
    pub oldest_queued_seconds: f64,
    /// Why this worker is unready (its database is away), if it is.
    pub unready: Option<String>,
}

/// One GPU at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct GpuMemory {
    /// "NVIDIA H200 (cuda:0)".
    pub device: String,
    /// The CUDA ordinal (the `0` of `cuda:0`) and the device's name.
    pub ordinal: u32,
    pub name: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// Seconds the device has been busy with proofs since start (CUDA
    /// events); its rate is the GPU's utilisation.
    pub busy_seconds: f64,
    /// The circuits whose keys this device streams from the host's memory
    /// (too large to stay on it beside a partition).
    pub streamed_keys: Vec<String>,
    /// The circuits with recorded matrices whose a, b and c this device
    /// leaves to the host's cores: `gpu.products = "cpu"`, or no room for
    /// their matrices beside the key and a proof (a 32 GiB sector on a
    /// 16 GiB card).
    pub products_on_host: Vec<String>,
}

/// Snapshots kept for clients that connect later: ten minutes at one a second.
pub(super) const HISTORY: usize = 600;

impl Service {
    /// The worker's metrics, for the layers that count what the engine does
    /// not see (connections refused by the HTTP server).
    pub fn metrics(&self) -> &Arc<crate::telemetry::Metrics> {
        self.engine.metrics()
    }

    /// The Prometheus exposition, with the gauges that are read on demand
    /// (GPU memory, key residency) refreshed first.
    pub fn metrics_text(&self) -> String {
        let m = self.engine.metrics();
        for (counter, now) in [
            (&m.log_lines_dropped, crate::telemetry::logging::lines_dropped()),
            (&m.panics, crate::telemetry::logging::panics()),
        ] {
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        self.gpu_memory();
        self.refresh_key_residency();
        self.engine.metrics().render()
    }

    /// Copies each backend's key residency into the metrics (per device;
    /// the device location of `srs_bytes` sums every device's copy).
    fn refresh_key_residency(&self) {
        let m = self.engine.metrics();
        let mut device_bytes: BTreeMap<&str, u64> =
            self.intake.circuits.names().map(|n| (n.as_str(), 0)).collect();
        for backend in &self.backends {
            let res = backend.resident_keys();
            let device = backend.name();
            for (name, served) in self.intake.circuits.iter() {
                let fp = served.kind.key().fingerprint();
                if let Some(k) = res.keys.iter().find(|k| k.fingerprint == fp) {
                    *device_bytes.get_mut(name.as_str()).expect("every circuit") += k.device_bytes;
                    let c = m.key_uploads.with_label_values(&[name, device]);
                    c.inc_by(k.uploads.saturating_sub(c.get()));
                    for layout in crate::backend::BasesLayout::ALL {
                        let now = k.layout == Some(layout);
                        m.key_layout.with_label_values(&[name, device, layout.name()]).set(now as i64);
                    }
                }
            }
            if !self.gpus.is_empty() {
                let c = m.key_evictions.with_label_values(&[device]);
                c.inc_by(res.evictions.saturating_sub(c.get()));
            }
        }
        for (name, bytes) in device_bytes {
            m.srs_bytes.with_label_values(&[name, "device"]).set(bytes as i64);
        }
    }

    /// The circuits whose keys the backend of `device` streams from the
    /// host, and those with recorded matrices whose a, b and c it leaves to
    /// the host.
    fn held_on_host(&self, device: &str) -> (Vec<String>, Vec<String>) {
        let Some(backend) = self.backends.iter().find(|b| b.name() == device) else {
            return Default::default();
        };
        let resident = backend.resident_keys();
        let named = |holds: &dyn Fn(&dyn crate::circuits::CircuitKind) -> bool| -> Vec<String> {
            let circuits = self.intake.circuits.iter();
            circuits
                .filter(|(_, served)| holds(served.kind.as_ref()))
                .map(|(name, _)| name.to_string())
                .collect()
        };
        let streamed = named(&|kind| {
            let fp = kind.key().fingerprint();
            resident
                .keys
                .iter()
                .any(|k| k.fingerprint == fp && k.layout == Some(crate::backend::BasesLayout::Streamed))
        });
        let products = named(&|kind| {
            kind.abc_from() == crate::groth16::AbcFrom::Matrices
                && backend.products(kind.key()) == crate::backend::ProductsPlacement::Cpu
        });
        (streamed, products)
    }

    /// Device memory per GPU now; also sets the GPU memory gauges, which
    /// nothing else updates (a scrape of /metrics calls this).
    pub fn gpu_memory(&self) -> Vec<GpuMemory> {
        let m = self.engine.metrics();
        self.gpus
            .iter()
            .filter_map(|g| {
                let (free, total) = g.memory().ok()?;
                let used = total.saturating_sub(free) as u64;
                // labelled as the backend names the device ("cuda:0"), like every per-device metric
                let device = format!("cuda:{}", g.info().ordinal);
                m.gpu_memory_used_bytes.with_label_values(&[&device]).set(used as i64);
                m.gpu_memory_total_bytes.with_label_values(&[&device]).set(total as i64);
                let (streamed_keys, products_on_host) = self.held_on_host(&device);
                Some(GpuMemory {
                    streamed_keys,
                    products_on_host,
                    device: format!("{} ({device})", g.info().name),
                    ordinal: g.info().ordinal as u32,
                    name: g.info().name.clone(),
                    used_bytes: used,
                    total_bytes: total as u64,
                    busy_seconds: m.gpu_busy_seconds.with_label_values(&[&device]).get(),
                })
            })
            .collect()
    }

    /// The state of everything now.
    pub fn snapshot(&self) -> Snapshot {
        let m = self.engine.metrics();
        let ledger = self.engine.ledger();
        Snapshot {
            t: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            stages: crate::pipeline::Stage::IN_PIPELINE
                .iter()
                .map(|st| (st.name(), m.partitions_in_stage.with_label_values(&[st.name()]).get()))
                .collect(),
            buffers: ledger.counts(),
            buffer_bytes: ledger.bytes(),
            reserved_bytes: self.engine.budget().reserved(),
            witness_bytes: m.witness_bytes.get().max(0) as u64,
            key_bytes: self.engine.budget().resident(),
            budget_bytes: self.engine.budget().total(),
            rss_bytes: crate::telemetry::rss_bytes(),
            gpu_queue_depth: m.gpu_queue_depth.get(),
            gpu_queue_capacity: m.gpu_queue_capacity.get(),
            partitions_waiting: self.engine.queued_partitions(),
            priorities: {
                let queued = self.engine.queued_by_priority();
                crate::pipeline::Priority::ALL
                    .into_iter()
                    .map(|p| {
                        let gpu_queue = m.gpu_queue_depth_by_priority.with_label_values(&[p.name()]).get();
                        (p.name(), WaitingByPriority { queued: queued[p.rank()], gpu_queue })
                    })
                    .collect()
            },
            critical_headroom_bytes: self.engine.budget().headroom(),
            partitions_completed: m.partitions_ended(Some(Outcome::Succeeded)),
            partitions_failed: m.partitions_ended(Some(Outcome::Failed)),
            jobs_succeeded: m.jobs_ended(Outcome::Succeeded),
            jobs_failed: m.jobs_ended(Outcome::Failed),
            jobs_cancelled: m.jobs_ended(Outcome::Cancelled),
            unfinished_jobs: self.unfinished_jobs(),
            gpus: self.gpu_memory(),
            fleet: self.jobs.fleet(),
        }
    }

    /// Jobs not yet ended, per circuit served (every circuit listed); in
    /// fleet mode, those this worker holds.
    pub fn unfinished_jobs(&self) -> BTreeMap<String, UnfinishedJobs> {
        let mut by_circuit: BTreeMap<String, UnfinishedJobs> =
            self.intake.circuits.names().map(|n| (n.clone(), UnfinishedJobs::default())).collect();
        for job in self.unfinished_statuses() {
            let counts = by_circuit.entry(job.circuit.clone()).or_default();
            match job.state() {
                "queued" => counts.queued += 1,
                "running" => counts.running += 1,
                _ => {} // ended since it was listed
            }
        }
        by_circuit
    }

    /// The states of the jobs that have not ended (in fleet mode, this
    /// worker's claims).
    pub fn unfinished_statuses(&self) -> Vec<JobStatus> {
        self.engine.unfinished_statuses()
    }

    /// Takes a snapshot into the history (called once a tick) and returns it.
    pub fn tick(&self) -> Snapshot {
        let snap = self.snapshot();
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(snap.clone());
        drop(h);
        self.jobs.maintain(Duration::from_secs(self.config.server.job_retention_seconds));
        snap
    }

    pub fn history(&self) -> Vec<Snapshot> {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    pub fn recent_jobs(&self, n: usize) -> Vec<JobStatus> {
        self.engine.recent_jobs(n)
    }
}
