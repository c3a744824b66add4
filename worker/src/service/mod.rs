//! The service: the facade the front doors (HTTP today) and `provd demo`
//! use. A request flows one way through its rooms:
//!
//! - [`intake`]: a request becomes a job (circuit, limits, idempotency
//!   digest, memory holds, decoding by the circuit's kind);
//! - [`Jobs`]: where accepted jobs go, chosen once at start-up:
//!   [`local::LocalJobs`] (this worker's engine and its journal, with
//!   restart recovery) or [`fleet::FleetJobs`] (the fleet's queue);
//! - [`circuits`]: the circuits served and their verifying keys;
//! - [`snapshot`]: what /v1/status, /v1/events, the dashboard and /metrics show.
//!
//! The engine below (`crate::pipeline`) knows none of this: it proves the
//! partitions it is given and reports their ends to an observer (the journal).

pub mod circuits;
pub mod fleet;
pub mod intake;
mod jobs;
pub mod local;
pub mod snapshot;
pub mod starting;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::backend::{Backend, BackendChoice};
use crate::circuits::{CircuitKind, VkEncoding};
use crate::config::{Config, JobStoreKind};
use crate::groth16::Verifier;
use crate::jobs::journal::{Journal, Recovered, SqliteJournal};
use crate::pipeline::memory::HeldWitness;
use crate::pipeline::{Door, Engine, JobId, JobObserver, JobStatus};
use crate::telemetry::Metrics;
pub use circuits::{Served, UnknownCircuit, VkError};
use intake::Intake;
pub use intake::{Idempotency, JobInput, Refusal, RequestError, RequestKey, Submitted, Witnesses};
pub use jobs::{Jobs, Unavailable};
pub use snapshot::{FleetSnapshot, GpuMemory, Snapshot, UnfinishedJobs};
pub use starting::{StartProgress, StartStep};

/// A backend (device) the service proves on, as chosen, and its health.
#[derive(Clone, Debug, Serialize)]
pub struct BackendInfo {
    pub name: String,
    /// Why the GPU is unused, when `auto` fell back to the CPU.
    pub fallback: Option<String>,
    /// Whether it takes work; once device faults took it out, why not.
    pub in_service: bool,
    pub out_of_service_reason: Option<String>,
}

/// Why a worker is not ready for work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unready {
    /// Engine threads died (named, with why): only a restart helps.
    DeadThreads(Vec<String>),
    /// No device takes work (why).
    NoDevice(String),
    /// The job store is unreachable or refusing writes (why).
    Store(String),
}

impl Unready {
    /// The reason without its details (paths, database errors), for a
    /// caller that has not authenticated.
    pub fn summary(&self) -> &'static str {
        match self {
            Unready::DeadThreads(_) => "engine threads died; restart provd",
            Unready::NoDevice(_) => "no device is in service",
            Unready::Store(_) => "the job store is unavailable",
        }
    }
}

impl std::fmt::Display for Unready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unready::DeadThreads(dead) => {
                write!(f, "engine threads died: {}; restart provd", dead.join(", "))
            }
            Unready::NoDevice(why) | Unready::Store(why) => f.write_str(why),
        }
    }
}

/// The one facade over the engine, the circuits and the job store.
pub struct Service {
    engine: Arc<Engine>,
    intake: Arc<Intake>,
    jobs: Box<dyn Jobs>,
    pub config: Config,
    backends: Vec<Arc<dyn Backend>>,
    /// Why the GPU is unused, when `auto` fell back to the CPU.
    fallback: Option<String>,
    gpus: Vec<Arc<provd_kernels::Gpu>>,
    history: Mutex<VecDeque<Snapshot>>,
    /// The data directory, held by this process alone (see [`Service::start`]).
    _data_dir: Option<crate::Exclusive>,
}

/// The memory other work leaves free for critical work: as configured, or
/// one partition of the largest circuit whose jobs are critical by default
/// (a WinningPoSt arrives unannounced; room for one partition is what lets
/// it start at once, and more than one is rarely in flight).
fn critical_headroom(
    config: &crate::pipeline::PipelineConfig,
    circuits: &circuits::Circuits,
    engine: &Engine,
) -> u64 {
    let bytes = config.critical_headroom.map(|b| b.0).unwrap_or_else(|| {
        circuits
            .iter()
            .filter(|(_, s)| s.priority == crate::pipeline::Priority::Critical)
            .map(|(_, s)| engine.footprint(s.kind.key()).total())
            .max()
            .unwrap_or(0)
    });
    let budget = engine.budget();
    let room = budget.total().saturating_sub(budget.resident());
    for (name, served) in circuits.iter().filter(|(_, s)| s.priority != crate::pipeline::Priority::Critical) {
        let need = engine.footprint(served.kind.key()).total();
        if need + bytes > room {
            tracing::warn!(circuit = %name, need, headroom = bytes, room,
                "the memory kept for critical work leaves too little for one partition of this circuit: only \
                 critical jobs of it can run; lower pipeline.critical_headroom or raise pipeline.memory_budget");
        }
    }
    if bytes > 0 {
        tracing::info!(headroom_mib = bytes >> 20, "memory kept free for critical work");
    }
    bytes
}

/// Why a key could not be uploaded ahead of its first partition.
#[derive(Debug, thiserror::Error)]
pub enum PreloadError {
    #[error(transparent)]
    UnknownCircuit(#[from] UnknownCircuit),
    /// Its device layout is known only from a witness.
    #[error(
        "circuit '{0}' synthesizes by its recorder, so its device layout is known only from a witness: its \
         first partition on each GPU uploads its key"
    )]
    LayoutUnknown(String),
    #[error("uploading the key to {device}: {why}")]
    Device { device: String, why: String },
}

/// How waiting for a job ended ([`Service::ended`]).
#[derive(Debug)]
pub enum Waited {
    /// No such job (or it expired).
    Unknown,
    Ended(JobStatus),
    /// It had not ended when the wait's time was up.
    TimedOut,
}

/// What a request says beside its circuit and witnesses.
#[derive(Clone, Debug, Default)]
pub struct SubmitOptions {
    /// How urgent the job is; `None`: the circuit's default.
    pub priority: Option<crate::pipeline::Priority>,
    /// The client's name for the request: a retry of the same request under
    /// it returns the job the first one created (unless that job failed or
    /// was cancelled: then the retry runs again). What another request under
    /// the same name gets is the key's kind's ([`RequestKey`]).
    pub key: Option<RequestKey>,
    /// The front door the request came through.
    pub door: Door,
}

impl SubmitOptions {
    /// Under an idempotency key, at the circuit's priority.
    pub fn keyed(key: &str) -> Self {
        Self { key: Some(RequestKey::Idempotency(key.to_string())), ..Self::default() }
    }
}

impl Service {
    /// Loads every configured circuit's key (generating TEST-ONLY keys where
    /// none is named), picks the backend and starts the engine.
    /// The data directory is held by this process alone: a second one on it
    /// is refused, saying which holds it (two would race on the TEST-ONLY key
    /// cache and the journal).
    pub fn start(config: Config, data_dir: &Path, backend: BackendChoice) -> anyhow::Result<Arc<Self>> {
        Self::start_reporting(config, data_dir, backend, &StartProgress::default())
    }

    /// As [`Service::start`], telling `progress` each step as it begins (for
    /// `/readyz` while it runs).
    pub fn start_reporting(
        mut config: Config,
        data_dir: &Path,
        backend: BackendChoice,
        progress: &StartProgress,
    ) -> anyhow::Result<Arc<Self>> {
        progress.enter(StartStep::LockingDataDir);
        std::fs::create_dir_all(data_dir)
            .map_err(|e| anyhow::anyhow!("cannot create the data directory {}: {e}", data_dir.display()))?;
        let lock = crate::Exclusive::take(&data_dir.join(".provd.lock"), data_dir)?;
        if config.jobs.store == JobStoreKind::Sqlite && config.jobs.path.is_none() {
            config.jobs.path = Some(data_dir.join("jobs.sqlite3"));
        }
        let of = config.circuits.len();
        let kinds = config
            .circuits
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let circuit = c.name().to_string();
                progress.enter(StartStep::LoadingCircuit { circuit: circuit.clone(), index: i + 1, of });
                Ok((circuit, c.load(data_dir)?))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        progress.enter(StartStep::OpeningBackend);
        let selected = crate::backend::select(backend, data_dir, &config.gpu.cuda_options()?)?;
        progress.enter(StartStep::StartingEngine);
        let service =
            Self::build(config, kinds, selected.backends, selected.fallback, selected.gpus, Some(lock))?;
        Ok(Arc::new(service))
    }

    /// Starts the service on circuits and a backend the caller made: any
    /// [`CircuitKind`], whether or not the config knows its kind.
    pub fn start_with(
        config: Config,
        kinds: Vec<(String, Arc<dyn CircuitKind>)>,
        backends: Vec<Arc<dyn Backend>>,
        fallback: Option<String>,
        gpus: Vec<Arc<provd_kernels::Gpu>>,
    ) -> anyhow::Result<Arc<Self>> {
        Self::build(config, kinds, backends, fallback, gpus, None).map(Arc::new)
    }

    fn build(
        config: Config,
        kinds: Vec<(String, Arc<dyn CircuitKind>)>,
        backends: Vec<Arc<dyn Backend>>,
        fallback: Option<String>,
        gpus: Vec<Arc<provd_kernels::Gpu>>,
        data_dir: Option<crate::Exclusive>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(!backends.is_empty(), "the service needs at least one backend");
        let kind_of = |b: &Arc<dyn Backend>| b.name().split(':').next().unwrap_or("").to_string();
        let metrics = Arc::new(Metrics::new());
        metrics
            .build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                crate::telemetry::metrics::COMMIT,
                &kind_of(&backends[0]),
            ])
            .set(1);
        metrics.memory_limit_bytes.set(config.pipeline.memory_limit_bytes() as i64);
        metrics.backend_fallback.set(i64::from(fallback.is_some()));
        for door in Door::ALL {
            for answer in ["accepted", "replayed", "refused"] {
                metrics.requests.with_label_values(&[door.name(), answer]);
            }
        }
        // The journal (when the config names one: `Service::start` does for
        // the SQLite store) is read before the engine starts, and observes
        // every end the engine reports.
        let (journal, recovered) = match (&config.jobs.store, &config.jobs.path) {
            (JobStoreKind::Sqlite, Some(path)) => {
                let (journal, recovered) = SqliteJournal::open(path)?;
                tracing::info!(journal = %path.display(), ended = recovered.ended.len(),
                    unfinished = recovered.unfinished.len(), "job journal open");
                (Some(Arc::new(journal) as Arc<dyn Journal>), recovered)
            }
            _ => (None, Recovered::default()),
        };
        let observer = journal.clone().map(|j| j as Arc<dyn JobObserver>);
        let engine = Arc::new(Engine::start_observed(
            config.pipeline.clone(),
            backends.clone(),
            metrics.clone(),
            observer,
        )?);
        let mut circuits = circuits::Circuits::default();
        for (name, kind) in kinds {
            // The budget holds all the kind keeps resident (key and recorded
            // matrices); provd_srs_bytes reports the key alone.
            let bytes = kind.resident_bytes();
            let hold = engine.hold_key(&name, bytes)?;
            let key_bytes = kind.key().resident_bytes() as u64;
            metrics.srs_bytes.with_label_values(&[&name, "host"]).set(key_bytes as i64);
            metrics.serve_circuit(&name);
            metrics.srs_bytes.with_label_values(&[&name, "device"]).set(0);
            let verifier = Arc::new(Verifier::new(&kind.key().vk));
            let priority = config
                .circuits
                .iter()
                .find(|c| c.name() == name)
                .and_then(|c| c.priority())
                .unwrap_or_else(|| kind.default_priority());
            tracing::info!(circuit = %name, kind = kind.kind(), priority = priority.name(), key_mib = key_bytes >> 20,
                resident_mib = bytes >> 20, "serving");
            circuits.insert(name, Served { kind, verifier, priority, _budget: hold })?;
        }
        engine.keep_for_critical(critical_headroom(&config.pipeline, &circuits, &engine));
        let limit = config.server.max_queued_partitions;
        let intake = Arc::new(Intake::new(circuits, engine.clone(), limit, config.pipeline.verify_proofs));
        let jobs: Box<dyn Jobs> = match &config.jobs.store {
            JobStoreKind::Postgres(url) => {
                let p = &config.pipeline;
                let default_claims = p.partition_permits + p.gpu_queue_capacity * backends.len();
                let runner = Arc::new(fleet::ClaimRunner { intake: intake.clone(), engine: engine.clone() });
                let retention = Duration::from_secs(config.server.job_retention_seconds);
                let fleet = crate::fleet::Fleet::start(
                    url.0.clone(),
                    config.fleet.clone(),
                    default_claims,
                    retention,
                    p.priority_aging(),
                    runner,
                    &metrics.registry,
                )
                .map_err(|e| anyhow::anyhow!("fleet mode: the job queue at {url:?}: {e}"))?;
                Box::new(fleet::FleetJobs::new(intake.clone(), engine.clone(), fleet, limit))
            }
            JobStoreKind::Sqlite | JobStoreKind::Memory => {
                let local = local::LocalJobs::new(intake.clone(), engine.clone(), journal, limit);
                local.recover(recovered, config.jobs.on_restart);
                Box::new(local)
            }
        };
        Ok(Self {
            engine,
            intake,
            jobs,
            config,
            backends,
            fallback,
            gpus,
            history: Mutex::new(VecDeque::with_capacity(snapshot::HISTORY)),
            _data_dir: data_dir,
        })
    }

    /// The circuits served, by name.
    pub fn circuits(&self) -> impl Iterator<Item = (&str, &Arc<dyn CircuitKind>)> {
        self.intake.circuits.iter().map(|(n, s)| (n.as_str(), &s.kind))
    }

    /// The served circuits with what the service keeps beside their kinds.
    pub fn served(&self) -> impl Iterator<Item = (&str, &Served)> {
        self.intake.circuits.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// The circuit named `name`.
    pub fn circuit(&self, name: &str) -> Option<&Arc<dyn CircuitKind>> {
        self.intake.circuits.get(name).ok().map(|s| &s.kind)
    }

    /// The verifying key of `circuit` in `encoding` (the kind's default when
    /// `None`): its encoding and bytes.
    pub fn verifying_key(
        &self,
        circuit: &str,
        encoding: Option<&str>,
    ) -> Result<(VkEncoding, Vec<u8>), VkError> {
        self.intake.circuits.verifying_key(circuit, encoding)
    }

    /// The backends (one per device) and their health.
    pub fn backends(&self) -> Vec<BackendInfo> {
        self.engine
            .devices()
            .into_iter()
            .map(|d| BackendInfo {
                name: d.name,
                fallback: self.fallback.clone(),
                in_service: d.in_service,
                out_of_service_reason: d.reason,
            })
            .collect()
    }

    /// The backends' names, "cuda:0, cuda:1".
    pub fn backend_names(&self) -> String {
        self.backends.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
    }

    /// What one partition of `circuit` reserves against the memory budget on
    /// the devices served (0 for a circuit not served here).
    pub fn partition_estimate_bytes(&self, circuit: &str) -> u64 {
        self.intake
            .circuits
            .get(circuit)
            .map_or(0, |s| self.engine.admission_bytes(s.kind.key(), s.kind.abc_from()))
    }

    /// Device bytes a circuit's key takes on the GPUs now, every device's
    /// copy together (0 when not resident, or on the CPU).
    pub fn key_device_bytes(&self, circuit: &str) -> u64 {
        let Ok(s) = self.intake.circuits.get(circuit) else { return 0 };
        let fp = s.kind.key().fingerprint();
        self.backends
            .iter()
            .flat_map(|b| b.resident_keys().keys)
            .filter(|k| k.fingerprint == fp)
            .map(|k| k.device_bytes)
            .sum()
    }

    /// The devices that stream a circuit's key from the host's memory now
    /// (its plain bases did not fit them, or `gpu.bases = "streamed"`).
    pub fn key_streamed_on(&self, circuit: &str) -> Vec<String> {
        let Ok(s) = self.intake.circuits.get(circuit) else { return Vec::new() };
        let fp = s.kind.key().fingerprint();
        self.backends
            .iter()
            .filter(|b| {
                b.resident_keys()
                    .keys
                    .iter()
                    .any(|k| k.fingerprint == fp && k.layout == Some(crate::backend::BasesLayout::Streamed))
            })
            .map(|b| b.name().to_string())
            .collect()
    }

    /// Uploads a circuit's key to every device now, as its first partition
    /// there would: whether every device held it already, and how long the
    /// uploads took.
    pub fn preload_key(&self, circuit: &str) -> Result<(bool, Duration), PreloadError> {
        let served = self.intake.circuits.get(circuit)?;
        let b_inputs =
            served.kind.b_dense_inputs().ok_or_else(|| PreloadError::LayoutUnknown(circuit.to_string()))?;
        let t = std::time::Instant::now();
        let mut already = true;
        for backend in &self.backends {
            already &= backend.preload(served.kind.key(), b_inputs).map_err(|e| PreloadError::Device {
                device: backend.name().to_string(),
                why: e.to_string(),
            })?;
        }
        Ok((already, t.elapsed()))
    }

    /// Drops a circuit's key from every device (its next partition on each
    /// uploads it again); the device bytes freed.
    pub fn evict_key(&self, circuit: &str) -> u64 {
        let Ok(served) = self.intake.circuits.get(circuit) else { return 0 };
        self.backends.iter().map(|b| b.evict(served.kind.key())).sum()
    }

    /// Why no device takes work, or `None` while one does.
    pub fn none_in_service(&self) -> Option<String> {
        self.engine.none_in_service()
    }

    /// Validates a request's partitions with the circuit's kind and submits the job.
    pub fn submit(&self, circuit: &str, partitions: Vec<serde_json::Value>) -> Result<JobId, RequestError> {
        let options = SubmitOptions { door: Door::InProcess, ..SubmitOptions::default() };
        let submitted = self.submit_witnesses(circuit, Witnesses::Json(partitions), options);
        self.count_request(Door::InProcess, submitted.as_ref().ok());
        submitted.map(Submitted::id)
    }

    /// Submits a JSON job: its partitions, or an input its circuit's kind
    /// splits into partitions (checked as it is split).
    pub fn submit_job(
        &self,
        circuit: &str,
        job: JobInput,
        options: SubmitOptions,
    ) -> Result<Submitted, RequestError> {
        let partitions = self.intake.partitions(circuit, job)?;
        self.submit_witnesses(circuit, Witnesses::Json(partitions), options)
    }

    /// Holds the budget for one binary witness of `circuit` before its body
    /// is read: the body limit, and the hold.
    pub fn hold_binary_witness(&self, circuit: &str) -> Result<(u64, HeldWitness), RequestError> {
        self.intake.hold_binary_witness(circuit)
    }

    /// Validates a request's witnesses with the circuit's kind and submits
    /// the job; with an idempotency key, a retry of the same request returns
    /// the job the first one created. Witnesses of kinds that report their
    /// size ([`CircuitKind::witness_bytes`]) are held against the memory
    /// budget until their partitions end.
    pub fn submit_witnesses(
        &self,
        circuit: &str,
        witnesses: Witnesses,
        options: SubmitOptions,
    ) -> Result<Submitted, RequestError> {
        let priority = match options.priority {
            Some(p) => p,
            None => self.intake.circuits.get(circuit)?.priority,
        };
        let idempotency = options.key.map(|key| Idempotency::of(key, circuit, options.priority, &witnesses));
        self.jobs.submit(circuit, witnesses, priority, options.door, idempotency)
    }

    /// Counts a submission's answer in `provd_requests_total`: each front
    /// door counts what it answered (`None`: refused), whether the intake
    /// or the door itself refused it.
    pub fn count_request(&self, door: Door, answer: Option<&Submitted>) {
        let answer = match answer {
            Some(Submitted::New(_)) => "accepted",
            Some(Submitted::Existing(_)) => "replayed",
            None => "refused",
        };
        self.metrics().requests.with_label_values(&[door.name(), answer]).inc();
    }

    /// A job's state; in fleet mode any job of the fleet, read from the
    /// queue (`Err` while its database is away).
    pub fn job(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        self.jobs.status(id)
    }

    /// Waits (blocking) until a job this worker runs ends; `None` if there is no such job.
    pub fn wait(&self, id: JobId) -> Option<JobStatus> {
        self.engine.wait(id, None)
    }

    /// Waits until job `id` ends (or `timeout` passes) without holding a
    /// thread, so that many clients may wait at once: looks every few
    /// milliseconds, backing off to 100 ms, each look on the blocking pool
    /// (in fleet mode it reads the database). A client that goes away drops
    /// the wait with its request.
    pub async fn ended(
        self: &Arc<Self>,
        id: JobId,
        timeout: Option<Duration>,
    ) -> Result<Waited, Unavailable> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut pause = Duration::from_millis(2);
        loop {
            match self.off_thread(move |s| s.has_ended(id)).await? {
                None => return Ok(Waited::Unknown),
                Some(true) => break,
                Some(false) => {}
            }
            let next = tokio::time::Instant::now() + pause;
            if deadline.is_some_and(|d| d <= tokio::time::Instant::now()) {
                return Ok(Waited::TimedOut);
            }
            tokio::time::sleep_until(deadline.map_or(next, |d| d.min(next))).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
        Ok(self.off_thread(move |s| s.job(id)).await?.map_or(Waited::Unknown, Waited::Ended))
    }

    /// Runs a blocking look at the service on the blocking pool.
    async fn off_thread<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Service) -> T + Send + 'static,
    ) -> T {
        let s = self.clone();
        match tokio::task::spawn_blocking(move || f(&s)).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Whether the job has ended; `None` for an unknown job. Cheap: for
    /// waiting without a thread.
    pub fn has_ended(&self, id: JobId) -> Result<Option<bool>, Unavailable> {
        self.jobs.has_ended(id)
    }

    /// Cancels a job and returns its state; `None` if there is no such job.
    pub fn cancel(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        self.jobs.cancel(id)
    }

    /// Partitions waiting for a worker: accepted here and not yet admitted,
    /// or, in fleet mode, waiting in the fleet's queue (as its last
    /// heartbeat read it).
    pub fn queued_partitions(&self) -> usize {
        self.jobs.queued().iter().sum()
    }

    /// As [`Service::queued_partitions`], of one class: each class has its
    /// own bound (`server.max_queued_partitions`).
    pub fn queued_of(&self, priority: crate::pipeline::Priority) -> usize {
        self.jobs.queued()[priority.rank()]
    }

    /// Stops taking jobs and waits up to `grace` for accepted ones; returns
    /// (finished, cancelled).
    pub fn drain(&self, grace: Duration) -> (usize, usize) {
        self.jobs.drain(grace)
    }

    /// Why this worker should not be sent work now: an engine thread died,
    /// no device is in service, or its job store is unreachable.
    pub fn unready(&self) -> Option<Unready> {
        let dead = self.engine.dead_threads();
        if !dead.is_empty() {
            return Some(Unready::DeadThreads(dead));
        }
        self.none_in_service().map(Unready::NoDevice).or_else(|| self.jobs.unready().map(Unready::Store))
    }
}
