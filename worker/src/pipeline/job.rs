//! Jobs and partitions as the engine tracks them: per-partition stage and
//! timings, proofs, and the outcome. Every partition ends exactly once,
//! through its [`Ticket`], which reports "cancelled" if dropped unfinished.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use blstrs::Scalar;
use serde::Serialize;

use crate::groth16::{AbcFrom, Proof, ProvingKey, SynthesisFn, Verifier, WitnessCheck};
use crate::telemetry::labels::FailureReason;
pub use crate::telemetry::labels::{Door, Outcome, Priority, Stage};
use crate::telemetry::metrics::Metrics;

/// A job's id: a UUIDv7 (time-ordered, 74 random bits), so ids never repeat
/// across restarts or between workers, and a client holding an old id can
/// never be handed another client's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(uuid::Uuid);

impl JobId {
    /// A fresh id.
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7())
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl std::str::FromStr for JobId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::try_parse(s).map(Self)
    }
}

impl Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A job to run: one circuit (its key) and one synthesis per partition.
pub struct JobSpec {
    pub circuit: String,
    /// How urgent the job is: its partitions are served by it at every queue.
    pub priority: Priority,
    /// The front door it came through (carried for the job's document).
    pub door: Door,
    pub key: Arc<ProvingKey>,
    /// Checks every proof before it is returned; `None` returns proofs unchecked.
    pub verifier: Option<Arc<Verifier>>,
    /// Whether synthesis checks the witness, which decides whom a proof that
    /// fails verification blames.
    pub witness_check: WitnessCheck,
    /// Whether synthesis evaluates a, b and c or leaves them to the devices.
    pub abc_from: AbcFrom,
    pub partitions: Vec<SynthesisFn>,
}

/// Told of every partition's and job's end as it happens, before anyone
/// waiting on the job learns of it (the service's journal is one: a client
/// told "done" then finds the job done after a restart too).
pub trait JobObserver: Send + Sync {
    fn partition_ended(&self, job: JobId, index: usize, end: &EndedPartition);
    fn job_ended(&self, job: JobId, outcome: Outcome, error: Option<&str>);
}

/// How a partition ended.
#[derive(Clone, Debug)]
pub struct EndedPartition {
    pub stage: Stage,
    pub proof: Option<Proof>,
    pub public_inputs: Vec<Scalar>,
    pub error: Option<String>,
}

/// A job that ended before a restart, served again until it expires.
#[derive(Clone, Debug)]
pub struct EndedJob {
    pub id: JobId,
    pub circuit: String,
    pub priority: Priority,
    pub door: Door,
    pub outcome: Outcome,
    pub error: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    pub ended_ms: u64,
    pub partitions: Vec<EndedPartition>,
}

/// A partition of a job run again after a restart that had ended with a
/// proof: it keeps the proof and is not proved again.
#[derive(Clone, Debug, PartialEq)]
pub struct ProvedPartition {
    pub index: usize,
    pub proof: Proof,
    pub public_inputs: Vec<Scalar>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Seconds spent in each stage by one partition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StageTimes {
    /// From the job's acceptance until this partition's synthesis began
    /// (waiting for memory, a permit, and the partitions ahead of it).
    pub queued: Option<f64>,
    pub synthesis: Option<f64>,
    pub gpu_queue: Option<f64>,
    pub prove_start: Option<f64>,
    /// Of `prove_start` and `prove_finish`, the time the GPU was busy with
    /// this partition (CUDA events); absent on the CPU.
    pub gpu_device: Option<f64>,
    pub prove_finish: Option<f64>,
    /// Checking the proof before it is returned (`pipeline.verify_proofs`).
    pub verify: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct PartitionStatus {
    pub stage: Stage,
    /// The backend that took it to prove ("cuda:0", "cpu"), once one has.
    pub device: Option<String>,
    /// Device faults this partition met, one per failed try, oldest first.
    pub faults: Vec<String>,
    pub times: StageTimes,
    pub proof: Option<Proof>,
    pub public_inputs: Vec<Scalar>,
    pub error: Option<String>,
}

/// A consistent copy of a job's state.
#[derive(Clone, Debug)]
pub struct JobStatus {
    pub id: JobId,
    pub circuit: String,
    pub priority: Priority,
    pub door: Door,
    pub outcome: Option<Outcome>,
    pub error: Option<String>,
    pub partitions: Vec<PartitionStatus>,
    pub elapsed_seconds: f64,
}

impl JobStatus {
    /// queued (no partition started), running, or how it ended
    /// (succeeded, failed, cancelled).
    pub fn state(&self) -> &'static str {
        match self.outcome {
            Some(o) => o.name(),
            None if self.partitions.iter().all(|p| p.stage == Stage::Queued) => "queued",
            None => "running",
        }
    }
}

/// A job as the engine runs it: its partitions' states, and a condition
/// variable that `wait` sleeps on until the last partition ends.
pub struct Job {
    pub id: JobId,
    pub circuit: String,
    pub priority: Priority,
    pub door: Door,
    pub key: Arc<ProvingKey>,
    pub verifier: Option<Arc<Verifier>>,
    pub witness_check: WitnessCheck,
    pub abc_from: AbcFrom,
    observer: Option<Arc<dyn JobObserver>>,
    cancelled: AtomicBool,
    created: Instant,
    state: Mutex<JobState>,
    ended: Condvar,
    metrics: Arc<Metrics>,
}

struct JobState {
    partitions: Vec<PartitionStatus>,
    remaining: usize,
    outcome: Option<Outcome>,
    error: Option<String>,
    elapsed: Option<Duration>,
}

impl Job {
    pub(crate) fn new(
        id: JobId,
        spec: &JobSpec,
        metrics: Arc<Metrics>,
        observer: Option<Arc<dyn JobObserver>>,
    ) -> Arc<Self> {
        let n = spec.partitions.len();
        let partitions = (0..n)
            .map(|_| PartitionStatus {
                stage: Stage::Queued,
                device: None,
                faults: Vec::new(),
                times: StageTimes::default(),
                proof: None,
                public_inputs: Vec::new(),
                error: None,
            })
            .collect();
        Arc::new(Self {
            id,
            circuit: spec.circuit.clone(),
            priority: spec.priority,
            door: spec.door,
            key: spec.key.clone(),
            verifier: spec.verifier.clone(),
            witness_check: spec.witness_check,
            abc_from: spec.abc_from,
            observer,
            cancelled: AtomicBool::new(false),
            created: Instant::now(),
            state: Mutex::new(JobState {
                partitions,
                remaining: n,
                outcome: None,
                error: None,
                elapsed: None,
            }),
            ended: Condvar::new(),
            metrics,
        })
    }

    /// A job that ended before a restart, as it was recorded: served
    /// (state, proofs) until it expires.
    pub(crate) fn restored(ended: EndedJob, key: Arc<ProvingKey>, metrics: Arc<Metrics>) -> Arc<Self> {
        let now = now_ms();
        let created = Instant::now()
            .checked_sub(Duration::from_millis(now.saturating_sub(ended.created_ms)))
            .unwrap_or_else(Instant::now);
        let partitions = ended
            .partitions
            .into_iter()
            .map(|p| PartitionStatus {
                stage: p.stage,
                device: None,
                faults: Vec::new(),
                times: StageTimes::default(),
                proof: p.proof,
                public_inputs: p.public_inputs,
                error: p.error,
            })
            .collect();
        Arc::new(Self {
            id: ended.id,
            circuit: ended.circuit,
            priority: ended.priority,
            door: ended.door,
            key,
            verifier: None,
            witness_check: WitnessCheck::default(),
            abc_from: AbcFrom::default(),
            observer: None,
            cancelled: AtomicBool::new(false),
            created,
            state: Mutex::new(JobState {
                partitions,
                remaining: 0,
                outcome: Some(ended.outcome),
                error: ended.error,
                elapsed: Some(Duration::from_millis(ended.ended_ms.saturating_sub(ended.created_ms))),
            }),
            ended: Condvar::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    pub(crate) fn set_stage(&self, index: usize, stage: Stage) {
        self.lock().partitions[index].stage = stage;
    }

    /// Partition `index` enters `prove_start` on `device`.
    pub(crate) fn started_on(&self, index: usize, device: &str) {
        let p = &mut self.lock().partitions[index];
        p.stage = Stage::ProveStart;
        p.device = Some(device.to_string());
    }

    /// Keeps the reason a try of partition `index` failed on a device.
    pub(crate) fn note_fault(&self, index: usize, what: String) {
        self.lock().partitions[index].faults.push(what);
    }

    pub(crate) fn record(&self, index: usize, f: impl FnOnce(&mut StageTimes)) {
        f(&mut self.lock().partitions[index].times);
    }

    /// How the job ended, if it has (no copy of its partitions).
    pub fn outcome(&self) -> Option<Outcome> {
        self.lock().outcome
    }

    /// When the job was accepted.
    pub fn created(&self) -> Instant {
        self.created
    }

    /// How long ago the job ended (zero while it runs).
    pub fn ended_for(&self) -> Duration {
        let s = self.lock();
        match s.elapsed {
            Some(e) => self.created.elapsed().saturating_sub(e),
            None => Duration::ZERO,
        }
    }

    pub fn status(&self) -> JobStatus {
        let s = self.lock();
        JobStatus {
            id: self.id,
            circuit: self.circuit.clone(),
            priority: self.priority,
            door: self.door,
            outcome: s.outcome,
            error: s.error.clone(),
            partitions: s.partitions.clone(),
            elapsed_seconds: s.elapsed.unwrap_or_else(|| self.created.elapsed()).as_secs_f64(),
        }
    }

    /// Blocks until the job has ended (or `timeout` passes).
    pub fn wait(&self, timeout: Option<Duration>) -> JobStatus {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.lock();
        while s.outcome.is_none() {
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if wait == Some(Duration::ZERO) {
                break;
            }
            s = match wait {
                Some(w) => self.ended.wait_timeout(s, w).unwrap_or_else(|e| e.into_inner()).0,
                None => self.ended.wait(s).unwrap_or_else(|e| e.into_inner()),
            };
        }
        drop(s);
        self.status()
    }

    fn end_partition(
        &self,
        index: usize,
        stage: Stage,
        result: Option<(Proof, Vec<Scalar>)>,
        error: Option<String>,
    ) {
        if let Some(observer) = &self.observer {
            let (proof, public_inputs) = match &result {
                Some((proof, public)) => (Some(*proof), public.clone()),
                None => (None, Vec::new()),
            };
            let ended = EndedPartition { stage, proof, public_inputs, error: error.clone() };
            observer.partition_ended(self.id, index, &ended);
        }
        let mut s = self.lock();
        let p = &mut s.partitions[index];
        p.stage = stage;
        if let Some((proof, public)) = result {
            p.proof = Some(proof);
            p.public_inputs = public;
        }
        p.error = error.clone();
        let outcome = match stage {
            Stage::Done => Outcome::Succeeded,
            Stage::Failed => Outcome::Failed,
            _ => Outcome::Cancelled,
        };
        self.metrics.partitions.with_label_values(&[&self.circuit, outcome.name()]).inc();
        if let (Some(e), None) = (error, &s.error) {
            // The first failure fails the job and stops its other partitions.
            s.error = Some(format!("partition {index}: {e}"));
            self.cancelled.store(true, Ordering::Release);
        }
        s.remaining -= 1;
        self.conclude_if_ended(&mut s);
    }

    /// Partitions that ended with a proof before a restart: they keep it and
    /// are not run again (their ends already observed and counted). Called before
    /// the job's other partitions are queued; ends the job if none is left.
    pub(crate) fn restore_proved(&self, proved: Vec<ProvedPartition>) {
        let mut s = self.lock();
        for p in proved {
            let Some(slot) = s.partitions.get_mut(p.index) else { continue };
            if slot.stage == Stage::Done {
                continue;
            }
            slot.stage = Stage::Done;
            slot.proof = Some(p.proof);
            slot.public_inputs = p.public_inputs;
            s.remaining -= 1;
        }
        self.conclude_if_ended(&mut s);
    }

    /// Whether partition `index` still has to run.
    pub(crate) fn is_pending(&self, index: usize) -> bool {
        self.lock().partitions.get(index).is_some_and(|p| p.stage != Stage::Done)
    }

    /// Ends the job once no partition remains: the observer told first, then the
    /// waiters woken.
    fn conclude_if_ended(&self, s: &mut JobState) {
        if s.remaining == 0 && s.outcome.is_none() {
            let outcome = if s.error.is_some() {
                Outcome::Failed
            } else if s.partitions.iter().all(|p| p.stage == Stage::Done) {
                Outcome::Succeeded
            } else {
                Outcome::Cancelled
            };
            if let Some(observer) = &self.observer {
                // Before anyone waiting learns of the end.
                observer.job_ended(self.id, outcome, s.error.as_deref());
            }
            s.outcome = Some(outcome);
            let elapsed = self.created.elapsed();
            s.elapsed = Some(elapsed);
            self.metrics.jobs.with_label_values(&[&self.circuit, outcome.name()]).inc();
            self.metrics.job_duration.with_label_values(&[&self.circuit]).observe(elapsed.as_secs_f64());
            tracing::info!(job = %self.id, circuit = %self.circuit, outcome = outcome.name(), secs = elapsed.as_secs_f64(), "job ended");
            self.ended.notify_all();
        }
    }
}

/// One partition's obligation to end exactly once.
pub(crate) struct Ticket {
    pub job: Arc<Job>,
    pub index: usize,
    ended: bool,
}

impl Ticket {
    pub fn new(job: Arc<Job>, index: usize) -> Self {
        Self { job, index, ended: false }
    }

    pub fn succeed(mut self, proof: Proof, public: Vec<Scalar>) {
        self.ended = true;
        self.job.end_partition(self.index, Stage::Done, Some((proof, public)), None);
    }

    pub fn fail(mut self, reason: FailureReason, error: String) {
        self.ended = true;
        self.job.metrics.partition_failures.with_label_values(&[reason.name()]).inc();
        self.job.end_partition(self.index, Stage::Failed, None, Some(error));
    }

    /// As [`Ticket::fail`], once `holding` is let go: what the partition
    /// still holds (its guards, its permit, its attempt, whose synthesis may
    /// hold a received witness). A job is never seen failed while its memory
    /// is still counted.
    pub fn fail_after<H>(self, holding: H, reason: FailureReason, error: String) {
        drop(holding);
        self.fail(reason, error)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.ended {
            self.job.end_partition(self.index, Stage::Cancelled, None, None);
        }
    }
}
