//! The service: the pipeline engine, the circuits it serves, and the
//! snapshots of its state that /v1/status, /v1/events and the dashboard show.
//! The HTTP layer (`http`) and `provd demo` sit on top of it.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::backend::{Backend, BackendChoice};
use crate::circuits::{CircuitKind, VkEncoding};
use crate::config::Config;
use crate::fleet::{Fleet, QueueError, RunError};
use crate::groth16::Verifier;
use crate::jobs::journal::{
    AcceptedJob, Journal, Recovered, RecoveredWitness, SqliteJournal, StoredWitness, UnfinishedJob,
};
use crate::pipeline::buffers::ClassCounts;
use crate::pipeline::memory::{HeldWitness, Reservation};
use crate::pipeline::{
    Engine, Idempotency, JobId, JobSpec, JobStatus, Outcome, SubmitError, Submitted, SynthesisFn,
    WitnessDoesNotFit,
};
use crate::telemetry::Metrics;

/// A circuit the service proves: its kind (key resident), the prepared
/// verifying key, and the key's hold on the memory budget.
pub struct Served {
    pub kind: Arc<dyn CircuitKind>,
    verifier: Arc<Verifier>,
    _budget: Reservation,
}

/// Why a request was refused before a job existed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("unknown circuit '{name}'; this worker serves: {available}")]
    UnknownCircuit { name: String, available: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{queued} partitions are already waiting (limit {limit}); retry later")]
    QueueFull { queued: usize, limit: usize },
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// Received witnesses that the memory budget cannot hold (now, or ever).
    #[error(transparent)]
    Witness(#[from] WitnessDoesNotFit),
    /// A body the circuit's kind does not take.
    #[error("{0}")]
    UnsupportedBody(String),
    /// A witness larger than the job store can ever hold.
    #[error("{0}")]
    TooLarge(String),
}

/// A JSON job's witnesses, as a request gives them.
pub enum JobInput {
    /// One witness per partition.
    Partitions(Vec<serde_json::Value>),
    /// One input that the circuit's kind splits into partitions
    /// ([`CircuitKind::split`]).
    Input(serde_json::Value),
}

/// A request's witnesses, as they arrived.
pub enum Witnesses {
    /// One JSON value per partition, decoded by the circuit's kind.
    Json(Vec<serde_json::Value>),
    /// One partition's witness as a binary body, held against the budget
    /// since before it was read ([`Service::hold_binary_witness`]).
    Binary { bytes: Vec<u8>, held: HeldWitness },
}

impl Witnesses {
    fn count(&self) -> usize {
        match self {
            Witnesses::Json(v) => v.len(),
            Witnesses::Binary { .. } => 1,
        }
    }
}

/// A request's witnesses, decoded.
struct Decoded {
    /// One synthesis job per partition, each holding its witness's share of the budget.
    work: Vec<SynthesisFn>,
    /// What the journal keeps of them (empty when nothing is journaled).
    stored: Vec<StoredWitness>,
    /// What decoding alone needed (a binary body beside its decoded values),
    /// held until the caller drops it, after the journal has the body.
    _decoding: Option<HeldWitness>,
}

/// Wraps a partition's synthesis job so that it holds its witness's place
/// in the budget for as long as the job lives (until the partition ends).
fn holding(synthesize: SynthesisFn, held: HeldWitness) -> SynthesisFn {
    Arc::new(move || {
        let _held = &held;
        synthesize()
    })
}

/// Why a verifying key could not be served.
#[derive(Debug, thiserror::Error)]
pub enum VkError {
    #[error("unknown circuit '{name}'; this worker serves: {available}")]
    UnknownCircuit { name: String, available: String },
    #[error("{0}")]
    Encoding(String),
}

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
    pub partitions_completed: u64,
    pub partitions_failed: u64,
    pub jobs_succeeded: u64,
    pub jobs_failed: u64,
    pub jobs_cancelled: u64,
    pub gpus: Vec<GpuMemory>,
    /// In fleet mode: this worker's claims and the fleet's queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSnapshot>,
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
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// Seconds the device has been busy with proofs since start (CUDA
    /// events); its rate is the GPU's utilisation.
    pub busy_seconds: f64,
}

/// Snapshots kept for clients that connect later: ten minutes at one a second.
const HISTORY: usize = 600;

/// The one facade over the engine and the circuits that the HTTP layer and
/// `provd demo` use.
pub struct Service {
    engine: Engine,
    circuits: BTreeMap<String, Served>,
    pub config: Config,
    backends: Vec<Arc<dyn Backend>>,
    /// Why the GPU is unused, when `auto` fell back to the CPU.
    fallback: Option<String>,
    gpus: Vec<Arc<provd_kernels::Gpu>>,
    history: Mutex<VecDeque<Snapshot>>,
    /// Fleet mode (`jobs.store` a PostgreSQL URL): jobs go to the shared
    /// queue, and this worker claims from it.
    fleet: OnceLock<Arc<Fleet>>,
}

/// The fleet's queue could not be reached: retry later (503).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

impl From<QueueError> for Unavailable {
    fn from(e: QueueError) -> Self {
        Unavailable(e.to_string())
    }
}

/// Runs a fleet worker's claims on this service's engine.
struct ServiceRunner(std::sync::Weak<Service>);

impl crate::fleet::Runner for ServiceRunner {
    fn circuits(&self) -> Vec<(String, String)> {
        let Some(s) = self.0.upgrade() else { return Vec::new() };
        s.circuits.iter().map(|(name, c)| (name.clone(), hex::encode(c.kind.key().fingerprint()))).collect()
    }

    fn has_room(&self) -> bool {
        self.0.upgrade().is_some_and(|s| s.engine.queued_partitions() == 0 && s.none_in_service().is_none())
    }

    fn run(&self, claim: &crate::fleet::Claim) -> Result<JobId, RunError> {
        let s = self.0.upgrade().ok_or_else(|| RunError::NotNow("the service is stopping".into()))?;
        let served = s
            .circuits
            .get(&claim.circuit)
            .ok_or_else(|| RunError::Invalid(format!("circuit '{}' is not served here", claim.circuit)))?;
        let kind = served.kind.as_ref();
        // The decoded witness holds its place in the budget until the
        // partition ends, as a submitted one does.
        let held = match kind.witness_bytes() {
            Some(bytes) => Some(s.engine.hold_witness(bytes, kind.key()).map_err(|e| match e {
                WitnessDoesNotFit::Never { .. } => RunError::Invalid(e.to_string()),
                WitnessDoesNotFit::NotNow { .. } => RunError::NotNow(e.to_string()),
            })?),
            None => None,
        };
        let work = match &claim.witness {
            StoredWitness::Json(v) => kind.partition(claim.index, v.clone()),
            StoredWitness::Binary(b) => kind.partition_from_bytes(claim.index, b),
        }
        .map_err(|e| RunError::Invalid(e.to_string()))?;
        let work = match held {
            Some(held) => holding(work, held),
            None => work,
        };
        let spec = JobSpec {
            circuit: claim.circuit.clone(),
            key: kind.key().clone(),
            verifier: s.config.pipeline.verify_proofs.then(|| served.verifier.clone()),
            witness_check: kind.witness_check(),
            partitions: vec![work],
            witnesses: Vec::new(),
            id: None,
        };
        s.engine.submit(spec).map_err(|e| match e {
            SubmitError::NeverFits { .. } => RunError::Invalid(e.to_string()),
            _ => RunError::NotNow(e.to_string()),
        })
    }

    fn status(&self, local: JobId) -> Option<JobStatus> {
        self.0.upgrade()?.engine.status(local)
    }

    fn cancel(&self, local: JobId) {
        if let Some(s) = self.0.upgrade() {
            s.engine.cancel(local);
        }
    }
}

impl Service {
    /// Loads every configured circuit's key (generating TEST-ONLY keys where
    /// none is named), picks the backend and starts the engine.
    pub fn start(mut config: Config, data_dir: &Path, backend: BackendChoice) -> anyhow::Result<Arc<Self>> {
        if config.jobs.store == crate::config::JobStoreKind::Sqlite && config.jobs.path.is_none() {
            std::fs::create_dir_all(data_dir)?;
            config.jobs.path = Some(data_dir.join("jobs.sqlite3"));
        }
        let kinds = config
            .circuits
            .iter()
            .map(|c| Ok((c.name().to_string(), c.load(data_dir)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let selected = crate::backend::select(backend, data_dir, &config.gpu.cuda_options()?)?;
        Self::start_with(config, kinds, selected.backends, selected.fallback, selected.gpus)
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
        // The journal (when the config names one: `Service::start` does for
        // the SQLite store) is read before the engine starts and written by it.
        let (journal, recovered) = match (&config.jobs.store, &config.jobs.path) {
            (crate::config::JobStoreKind::Sqlite, Some(path)) => {
                let (journal, recovered) = SqliteJournal::open(path)?;
                tracing::info!(journal = %path.display(), ended = recovered.ended.len(),
                    unfinished = recovered.unfinished.len(), "job journal open");
                (Some(Arc::new(journal) as Arc<dyn Journal>), recovered)
            }
            _ => (None, Recovered::default()),
        };
        let engine = Engine::start_with_store(
            config.pipeline.clone(),
            backends.clone(),
            metrics.clone(),
            Arc::new(crate::jobs::MemoryStore::default()),
            journal,
        )?;
        let mut circuits = BTreeMap::new();
        for (name, kind) in kinds {
            // The budget holds all the kind keeps resident (key and recorded
            // matrices); provd_srs_bytes reports the key alone.
            let bytes = kind.resident_bytes();
            let hold = engine.hold_key(&name, bytes)?;
            let key_bytes = kind.key().resident_bytes() as u64;
            metrics.srs_bytes.with_label_values(&[&name, "host"]).set(key_bytes as i64);
            metrics.srs_bytes.with_label_values(&[&name, "device"]).set(0);
            let verifier = Arc::new(Verifier::new(&kind.key().vk));
            tracing::info!(circuit = %name, kind = kind.kind(), key_mib = key_bytes >> 20, resident_mib = bytes >> 20, "serving");
            anyhow::ensure!(
                circuits.insert(name.clone(), Served { kind, verifier, _budget: hold }).is_none(),
                "two circuits are named '{name}'"
            );
        }
        let service = Arc::new(Self {
            engine,
            circuits,
            config,
            backends,
            fallback,
            gpus,
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
            fleet: OnceLock::new(),
        });
        service.recover(recovered);
        if let crate::config::JobStoreKind::Postgres(url) = &service.config.jobs.store {
            let p = &service.config.pipeline;
            let default_claims = p.partition_permits + p.gpu_queue_capacity * service.backends.len();
            let runner = Arc::new(ServiceRunner(Arc::downgrade(&service)));
            let retention = Duration::from_secs(service.config.server.job_retention_seconds);
            let fleet = Fleet::start(
                url.0.clone(),
                service.config.fleet.clone(),
                default_claims,
                retention,
                runner,
                &metrics.registry,
            )
            .map_err(|e| anyhow::anyhow!("fleet mode: the job queue at {url:?}: {e}"))?;
            let _ = service.fleet.set(fleet);
        }
        Ok(service)
    }

    /// Takes up what the journal held: ended jobs are served again until they
    /// expire; unfinished ones run again from their witnesses (or end failed,
    /// by `jobs.on_restart`), under their own ids.
    fn recover(&self, recovered: Recovered) {
        for ended in recovered.ended {
            match self.circuits.get(&ended.circuit) {
                Some(served) => self.engine.restore_ended(ended, served.kind.key().clone()),
                None => tracing::warn!(job = %ended.id, circuit = %ended.circuit,
                    "a journaled job's circuit is no longer served; its results are not served"),
            }
        }
        for unfinished in recovered.unfinished {
            let (id, circuit, count) =
                (unfinished.id, unfinished.circuit.clone(), unfinished.witnesses.len());
            let proved = unfinished.proved.len();
            match self.rerun(unfinished) {
                Ok(()) => tracing::info!(job = %id, circuit = %circuit, partitions = count, proved,
                    "running a job again that was accepted before the restart (its proved partitions kept)"),
                Err(reason) => {
                    tracing::warn!(job = %id, circuit = %circuit, "a job accepted before the restart failed: {reason}");
                    self.engine.fail_recovered(id, &reason);
                    if let Some(served) = self.circuits.get(&circuit) {
                        let failed = crate::jobs::journal::EndedPartition {
                            stage: crate::pipeline::Stage::Failed,
                            proof: None,
                            public_inputs: Vec::new(),
                            error: Some(reason.clone()),
                        };
                        let now = crate::jobs::journal::now_ms();
                        let ended = crate::jobs::journal::EndedJob {
                            id,
                            circuit: circuit.clone(),
                            outcome: Outcome::Failed,
                            error: Some(reason),
                            created_ms: now,
                            ended_ms: now,
                            partitions: vec![failed; count],
                            idempotency: None,
                        };
                        self.engine.restore_ended(ended, served.kind.key().clone());
                    }
                }
            }
        }
    }

    /// Submits a journaled job again, or says why it cannot run.
    fn rerun(&self, job: UnfinishedJob) -> Result<(), String> {
        let UnfinishedJob { id, circuit, witnesses, idempotency, proved } = job;
        if self.config.jobs.on_restart == crate::config::OnRestart::Fail {
            return Err("provd restarted before the job ended (jobs.on_restart = \"fail\")".into());
        }
        let served = self
            .circuits
            .get(&circuit)
            .ok_or_else(|| format!("its circuit '{circuit}' is no longer served"))?;
        let witnesses = match witnesses.as_slice() {
            // The memory is held before the bytes are read.
            [RecoveredWitness::Binary(at)] => {
                let (_, held) = self.hold_binary_witness(&circuit).map_err(|e| e.to_string())?;
                let journal = self.engine.journal().ok_or("no journal holds its witness")?;
                let bytes = journal
                    .read_witness(at)
                    .map_err(|e| format!("its witness could not be read after the restart: {e}"))?;
                Witnesses::Binary { bytes, held }
            }
            _ => Witnesses::Json(
                witnesses
                    .into_iter()
                    .map(|w| match w {
                        RecoveredWitness::Json(v) => Ok(v),
                        RecoveredWitness::Binary(_) => Err("a binary witness among several".to_string()),
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let kind = &served.kind;
        let Decoded { work, stored, _decoding } =
            self.decode(kind.as_ref(), witnesses, true).map_err(|e| e.to_string())?;
        let spec = JobSpec {
            circuit,
            key: kind.key().clone(),
            verifier: self.config.pipeline.verify_proofs.then(|| served.verifier.clone()),
            witness_check: kind.witness_check(),
            partitions: work,
            witnesses: stored,
            id: Some(id),
        };
        let idempotency = idempotency.map(|(key, digest)| Idempotency { key, digest });
        self.engine.resubmit(spec, idempotency, proved).map(drop).map_err(|e| e.to_string())
    }

    fn served(&self, name: &str) -> Result<&Served, (String, String)> {
        self.circuits
            .get(name)
            .ok_or_else(|| (name.to_string(), self.circuits.keys().cloned().collect::<Vec<_>>().join(", ")))
    }

    /// The circuits served, by name.
    pub fn circuits(&self) -> impl Iterator<Item = (&str, &Arc<dyn CircuitKind>)> {
        self.circuits.iter().map(|(n, s)| (n.as_str(), &s.kind))
    }

    /// The circuit named `name`.
    pub fn circuit(&self, name: &str) -> Option<&Arc<dyn CircuitKind>> {
        self.circuits.get(name).map(|s| &s.kind)
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
        self.circuits.get(circuit).map_or(0, |s| self.engine.footprint(s.kind.key()).total())
    }

    /// Device bytes a circuit's key takes on the GPUs now, every device's
    /// copy together (0 when not resident, or on the CPU).
    pub fn key_device_bytes(&self, circuit: &str) -> u64 {
        let Some(s) = self.circuits.get(circuit) else { return 0 };
        let fp = s.kind.key().fingerprint();
        self.backends
            .iter()
            .flat_map(|b| b.resident_keys().keys)
            .filter(|k| k.fingerprint == fp)
            .map(|k| k.device_bytes)
            .sum()
    }

    /// Why no device takes work, or `None` while one does.
    pub fn none_in_service(&self) -> Option<String> {
        self.engine.none_in_service()
    }

    /// Validates a request's partitions with the circuit's kind and submits the job.
    pub fn submit(&self, circuit: &str, partitions: Vec<serde_json::Value>) -> Result<JobId, RequestError> {
        self.submit_with_key(circuit, partitions, None).map(Submitted::id)
    }

    /// As [`Service::submit`]; with an idempotency key, a retry of the same
    /// request returns the job the first one created.
    pub fn submit_with_key(
        &self,
        circuit: &str,
        partitions: Vec<serde_json::Value>,
        key: Option<String>,
    ) -> Result<Submitted, RequestError> {
        self.submit_witnesses(circuit, Witnesses::Json(partitions), key)
    }

    /// Submits a JSON job: its partitions, or an input its circuit's kind
    /// splits into partitions (checked as it is split).
    pub fn submit_job(
        &self,
        circuit: &str,
        job: JobInput,
        key: Option<String>,
    ) -> Result<Submitted, RequestError> {
        let partitions = match job {
            JobInput::Partitions(p) => p,
            JobInput::Input(input) => self
                .served(circuit)
                .map_err(|(name, available)| RequestError::UnknownCircuit { name, available })?
                .kind
                .split(input)
                .map_err(|e| RequestError::Invalid(e.to_string()))?,
        };
        self.submit_witnesses(circuit, Witnesses::Json(partitions), key)
    }

    /// Holds the budget for one binary witness of `circuit` before its body
    /// is read (the body and its decoded values, until decoding ends; then
    /// the values alone): the body limit, and the hold.
    pub fn hold_binary_witness(&self, circuit: &str) -> Result<(u64, HeldWitness), RequestError> {
        let served = self
            .served(circuit)
            .map_err(|(name, available)| RequestError::UnknownCircuit { name, available })?;
        let bytes = served.kind.witness_bytes().ok_or_else(|| {
            RequestError::UnsupportedBody(format!(
                "{circuit} is a {} circuit, whose witnesses are JSON: send 'Content-Type: application/json'",
                served.kind.kind()
            ))
        })?;
        Ok((bytes, self.engine.hold_witness(2 * bytes, served.kind.key())?))
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
        key: Option<String>,
    ) -> Result<Submitted, RequestError> {
        let idem = key.map(|key| {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            h.update(circuit.as_bytes());
            match &witnesses {
                Witnesses::Json(partitions) => {
                    h.update([0]);
                    // serde_json's maps are sorted: equal requests give equal bytes
                    h.update(serde_json::to_vec(partitions).expect("JSON values encode"));
                }
                Witnesses::Binary { bytes, .. } => {
                    h.update([1]);
                    h.update(bytes);
                }
            }
            Idempotency { key, digest: h.finalize().into() }
        });
        // A retry is answered before the queue and its limits are looked at
        // (in fleet mode, by the queue's database, with the submission).
        let fleet = self.fleet.get();
        if fleet.is_none() {
            if let Some(earlier) = idem.as_ref().and_then(|i| self.engine.earlier_submission(i)) {
                return Ok(earlier?);
            }
        }
        let served = self
            .served(circuit)
            .map_err(|(name, available)| RequestError::UnknownCircuit { name, available })?;
        let limit = self.config.server.max_queued_partitions;
        let count = witnesses.count();
        if count == 0 {
            return Err(RequestError::Invalid(
                "\"partitions\" is empty: a job needs at least one witness".into(),
            ));
        }
        if count > limit {
            return Err(RequestError::Invalid(format!(
                "{count} partitions in one job; at most {limit} (server.max_queued_partitions)"
            )));
        }
        let kind = &served.kind;
        if let Some(fleet) = fleet {
            // Decoded here only to refuse bad witnesses before they are queued.
            let Decoded { stored, .. } = self.decode(kind.as_ref(), witnesses, true)?;
            let job = AcceptedJob {
                id: JobId::new(),
                circuit: circuit.to_string(),
                witnesses: stored,
                idempotency: idem.map(|i| (i.key, i.digest)),
            };
            let worker = fleet.worker_id().to_string();
            return match fleet.with_queue(|q| q.submit(&job, &worker)) {
                Ok((id, true)) => Ok(Submitted::New(id)),
                Ok((id, false)) => Ok(Submitted::Existing(id)),
                Err(QueueError::KeyReused { key, job }) => Err(SubmitError::KeyReused { key, job }.into()),
                Err(e @ QueueError::WitnessTooLarge { .. }) => Err(RequestError::TooLarge(e.to_string())),
                Err(e) => Err(SubmitError::Journal(e.to_string()).into()),
            };
        }
        let queued = self.engine.queued_partitions();
        if queued + count > limit {
            return Err(RequestError::QueueFull { queued, limit });
        }
        let journaled = self.config.jobs.store == crate::config::JobStoreKind::Sqlite;
        let Decoded { work, stored, _decoding } = self.decode(kind.as_ref(), witnesses, journaled)?;
        let spec = JobSpec {
            circuit: circuit.to_string(),
            key: kind.key().clone(),
            verifier: self.config.pipeline.verify_proofs.then(|| served.verifier.clone()),
            witness_check: kind.witness_check(),
            partitions: work,
            witnesses: stored,
            id: None,
        };
        Ok(match idem {
            Some(idem) => self.engine.submit_once(spec, idem)?,
            None => Submitted::New(self.engine.submit(spec)?),
        })
    }

    /// Decodes a request's witnesses into synthesis jobs, each holding its
    /// witness's share of the budget; with `journaled`, also what the journal
    /// keeps of them.
    fn decode(
        &self,
        kind: &dyn CircuitKind,
        witnesses: Witnesses,
        journaled: bool,
    ) -> Result<Decoded, RequestError> {
        let invalid = |e: crate::circuits::WitnessError| RequestError::Invalid(e.to_string());
        Ok(match witnesses {
            Witnesses::Json(partitions) => {
                let count = partitions.len() as u64;
                let mut held = match kind.witness_bytes() {
                    Some(per) => Some((per, self.engine.hold_witness(per * count, kind.key())?)),
                    None => None,
                };
                let stored = if journaled {
                    partitions.iter().cloned().map(StoredWitness::Json).collect()
                } else {
                    Vec::new()
                };
                let work = partitions
                    .into_iter()
                    .enumerate()
                    .map(|(i, w)| {
                        let f = kind.partition(i, w).map_err(invalid)?;
                        Ok(match &mut held {
                            Some((per, hold)) => holding(f, hold.split(*per)),
                            None => f,
                        })
                    })
                    .collect::<Result<Vec<SynthesisFn>, RequestError>>()?;
                Decoded { work, stored, _decoding: None }
            }
            Witnesses::Binary { bytes, mut held } => {
                let f = kind.partition_from_bytes(0, &bytes).map_err(invalid)?;
                // The decoded values keep their share; the body's share goes
                // when the caller drops it (after the journal has the body).
                let kept = held.split(kind.witness_bytes().unwrap_or(0));
                let stored = if journaled { vec![StoredWitness::Binary(bytes)] } else { Vec::new() };
                Decoded { work: vec![holding(f, kept)], stored, _decoding: Some(held) }
            }
        })
    }

    /// A job's state; in fleet mode any job of the fleet, read from the
    /// queue (`Err` while its database is away).
    pub fn job(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        match self.fleet.get() {
            Some(fleet) => Ok(fleet.with_queue(|q| q.status(id))?),
            None => Ok(self.engine.status(id)),
        }
    }

    /// Waits (blocking) until the job ends; `None` if there is no such job.
    pub fn wait(&self, id: JobId) -> Option<JobStatus> {
        self.engine.wait(id, None)
    }

    /// Whether the job has ended; `None` for an unknown job. Cheap: for
    /// waiting without a thread.
    pub fn has_ended(&self, id: JobId) -> Result<Option<bool>, Unavailable> {
        match self.fleet.get() {
            Some(fleet) => Ok(fleet.with_queue(|q| q.has_ended(id))?),
            None => Ok(self.engine.outcome(id).map(|o| o.is_some())),
        }
    }

    /// Cancels a job and returns its state; `None` if there is no such job.
    /// In fleet mode the workers holding its partitions stop them at their
    /// next heartbeat.
    pub fn cancel(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        match self.fleet.get() {
            Some(fleet) => match fleet.with_queue(|q| q.cancel(id))? {
                true => self.job(id),
                false => Ok(None),
            },
            None => Ok(self.engine.cancel(id).then(|| self.engine.status(id)).flatten()),
        }
    }

    /// The fleet this worker belongs to, in fleet mode.
    pub fn fleet(&self) -> Option<&Arc<Fleet>> {
        self.fleet.get()
    }

    /// Partitions accepted but not yet admitted.
    pub fn queued_partitions(&self) -> usize {
        self.engine.queued_partitions()
    }

    /// Stops taking jobs and waits up to `grace` for accepted ones; returns
    /// (finished, cancelled).
    pub fn drain(&self, grace: Duration) -> (usize, usize) {
        let Some(fleet) = self.fleet.get() else { return self.engine.drain(grace) };
        // Claim nothing more; finish what is held and write it back (what
        // the grace cannot finish goes back to the queue when its lease
        // runs out).
        let start = std::time::Instant::now();
        fleet.stop_claiming();
        let left = self.engine.drain(grace);
        fleet.join(grace.saturating_sub(start.elapsed()).max(Duration::from_secs(1)));
        left
    }

    /// Why this worker should not be sent work now: an engine thread died,
    /// no device is in service, or (fleet mode) its queue is unreachable.
    pub fn unready(&self) -> Option<String> {
        let dead = self.engine.dead_threads();
        if !dead.is_empty() {
            return Some(format!("engine threads died: {}; restart provd", dead.join(", ")));
        }
        self.none_in_service().or_else(|| self.fleet.get().and_then(|f| f.unready()))
    }

    /// The verifying key of `circuit` in `encoding` (the kind's default when
    /// `None`): its content type and bytes.
    pub fn verifying_key(
        &self,
        circuit: &str,
        encoding: Option<&str>,
    ) -> Result<(VkEncoding, Vec<u8>), VkError> {
        let served =
            self.served(circuit).map_err(|(name, available)| VkError::UnknownCircuit { name, available })?;
        let offered = served.kind.verifying_key_encodings();
        let names = || offered.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ");
        let encoding = match encoding {
            None => offered[0],
            Some(e) => {
                let e: VkEncoding = e.parse().map_err(VkError::Encoding)?;
                if !offered.contains(&e) {
                    return Err(VkError::Encoding(format!(
                        "{circuit} has no '{}' encoding of its verifying key (offered: {})",
                        e.name(),
                        names()
                    )));
                }
                e
            }
        };
        let bytes = served.kind.verifying_key(encoding).ok_or_else(|| {
            VkError::Encoding(format!("{circuit} cannot encode its key as '{}'", encoding.name()))
        })?;
        Ok((encoding, bytes))
    }

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
        let mut device_bytes: BTreeMap<&str, u64> = self.circuits.keys().map(|n| (n.as_str(), 0)).collect();
        for backend in &self.backends {
            let res = backend.resident_keys();
            let device = backend.name();
            for (name, served) in &self.circuits {
                let fp = served.kind.key().fingerprint();
                if let Some(k) = res.keys.iter().find(|k| k.fingerprint == fp) {
                    *device_bytes.get_mut(name.as_str()).expect("every circuit") += k.device_bytes;
                    let c = m.key_uploads.with_label_values(&[name, device]);
                    c.inc_by(k.uploads.saturating_sub(c.get()));
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
                Some(GpuMemory {
                    device: format!("{} ({device})", g.info().name),
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
        let count = |v: &prometheus::IntCounterVec, o: Outcome| v.with_label_values(&[o.name()]).get();
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
            partitions_completed: count(&m.partitions, Outcome::Succeeded),
            partitions_failed: count(&m.partitions, Outcome::Failed),
            jobs_succeeded: count(&m.jobs, Outcome::Succeeded),
            jobs_failed: count(&m.jobs, Outcome::Failed),
            jobs_cancelled: count(&m.jobs, Outcome::Cancelled),
            gpus: self.gpu_memory(),
            fleet: self.fleet.get().map(|f| {
                let q = f.stats();
                FleetSnapshot {
                    worker: f.worker_id().to_string(),
                    claimed_here: f.claimed(),
                    queued: q.queued_partitions,
                    claimed: q.claimed_partitions,
                    oldest_queued_seconds: q.oldest_queued_seconds,
                    unready: f.unready(),
                }
            }),
        }
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
        self.engine.forget_ended(Duration::from_secs(self.config.server.job_retention_seconds));
        snap
    }

    pub fn history(&self) -> Vec<Snapshot> {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    pub fn recent_jobs(&self, n: usize) -> Vec<JobStatus> {
        self.engine.recent_jobs(n)
    }
}
