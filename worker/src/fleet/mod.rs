//! Fleet mode: many provd workers sharing one job queue in PostgreSQL
//! (`[jobs] store = "postgres"`).
//!
//! Any worker accepts jobs (they go to the queue, not to its own engine) and
//! answers for any job of the fleet. Each worker claims partitions while its
//! engine has room, runs each as a one-partition job of its own engine (so
//! the memory budget, the gauges and the GPU queue rules apply unchanged),
//! and writes the result back under its claim. Two threads do it:
//!
//! - the claimer: results of finished local runs written back, then new
//!   claims while there is room, every `poll_ms`;
//! - the heartbeat: leases renewed every `heartbeat_seconds` (a claim that
//!   lost its lease stops its local run), leases that ran out anywhere put
//!   back, the queue's length read for the metrics.
//!
//! A third, the ends watcher, reads whether the jobs clients wait on have
//! ended, all of them in one query every `poll_ms` (see `fleet/ends.rs`).
//!
//! While the database cannot be reached a worker claims nothing and reports
//! itself unready; local runs go on, and their results are written when it
//! comes back (or dropped, if their leases ran out and others took them).

mod ends;
pub mod queue;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus::{Gauge, IntCounter, IntGauge, IntGaugeVec, Opts, Registry};
use serde::Deserialize;

use crate::pipeline::{JobId, JobStatus};
use crate::telemetry::labels::Outcome;
pub use queue::{Claim, PartitionResult, Queue, QueueError, QueueStats, Written};

/// The `[fleet]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// This worker's name in the queue and its metrics; unset: the host's
    /// name and the process id.
    pub worker_id: Option<String>,
    /// How long a claim holds without a heartbeat; a dead worker's
    /// partitions go back to the queue after this.
    pub lease_seconds: u64,
    /// How often leases are renewed; unset: a third of the lease.
    pub heartbeat_seconds: Option<u64>,
    /// How often the claimer looks for work and for finished runs.
    pub poll_ms: u64,
    /// Tries of one partition (claims ending in a retryable failure or a
    /// lost lease) before its job fails.
    pub max_attempts: u32,
    /// Partitions this worker holds at once; unset: the pipeline's
    /// partition permits plus the GPU queue's capacity (enough to keep
    /// every stage busy, no more).
    pub max_claimed: Option<usize>,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            worker_id: None,
            lease_seconds: 30,
            heartbeat_seconds: None,
            poll_ms: 100,
            max_attempts: 3,
            max_claimed: None,
        }
    }
}

impl FleetConfig {
    fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_seconds.unwrap_or(self.lease_seconds / 3).max(1))
    }

    fn lease_ms(&self) -> i64 {
        (self.lease_seconds * 1000) as i64
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.lease_seconds < 2 {
            return Err("fleet.lease_seconds must be at least 2".into());
        }
        if self.heartbeat() >= Duration::from_secs(self.lease_seconds) {
            return Err("fleet.heartbeat_seconds must be shorter than fleet.lease_seconds".into());
        }
        if self.max_attempts == 0 {
            return Err("fleet.max_attempts must be at least 1".into());
        }
        if self.worker_id.as_deref().is_some_and(|w| w.trim().is_empty()) {
            return Err("fleet.worker_id is blank".into());
        }
        Ok(())
    }
}

/// What a worker runs claims on: its own engine, through the service.
pub trait Runner: Send + Sync {
    /// Circuits this worker serves (it claims only theirs), each with its
    /// proving key's fingerprint (hex).
    fn circuits(&self) -> Vec<(String, String)>;
    /// Whether a partition would be admitted now rather than wait.
    fn has_room(&self) -> bool;
    /// Starts a claimed partition as a local job.
    fn run(&self, claim: &Claim) -> Result<JobId, RunError>;
    fn status(&self, local: JobId) -> Option<JobStatus>;
    fn cancel(&self, local: JobId);
}

/// Why a claimed partition was not started here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// Its witness cannot be decoded, or its circuit is not served: the job
    /// fails (no worker would do better).
    Invalid(String),
    /// Not now (its witness does not fit the memory budget at the moment):
    /// handed back to the queue without using up an attempt.
    NotNow(String),
}

/// The fleet's metrics, each for this worker (Prometheus adds the instance).
struct FleetMetrics {
    claims: IntCounter,
    expiries: IntCounter,
    leases_lost: IntCounter,
    retries: IntCounter,
    fenced: IntCounter,
    claimed: IntGauge,
    queue: IntGaugeVec,
    oldest: Gauge,
    database_up: IntGauge,
}

impl FleetMetrics {
    fn register(r: &Registry) -> prometheus::Result<Self> {
        fn reg<T: prometheus::core::Collector + Clone + 'static>(
            r: &Registry,
            c: T,
        ) -> prometheus::Result<T> {
            r.register(Box::new(c.clone()))?;
            Ok(c)
        }
        Ok(Self {
            claims: reg(r, IntCounter::new("provd_fleet_claims_total", "Partitions this worker claimed from the fleet queue.")?)?,
            expiries: reg(r, IntCounter::new(
                "provd_fleet_lease_expiries_total",
                "Claims (of any worker) whose lease ran out, put back or failed by this worker's sweep.",
            )?)?,
            leases_lost: reg(r, IntCounter::new(
                "provd_fleet_leases_lost_total",
                "This worker's claims that no longer held their partition at a heartbeat (their local runs were stopped).",
            )?)?,
            retries: reg(r, IntCounter::new(
                "provd_fleet_retries_total",
                "Partitions this worker put back in the queue after a retryable failure.",
            )?)?,
            fenced: reg(r, IntCounter::new(
                "provd_fleet_results_fenced_total",
                "Results this worker dropped because its claim had lost the partition.",
            )?)?,
            claimed: reg(r, IntGauge::new("provd_fleet_claimed_partitions", "Partitions this worker holds now.")?)?,
            queue: reg(r, IntGaugeVec::new(
                Opts::new("provd_fleet_queue_partitions", "The fleet queue's partitions by state, as last read."),
                &["state"],
            )?)?,
            oldest: reg(r, Gauge::new(
                "provd_fleet_oldest_queued_seconds",
                "Age of the fleet's oldest queued partition, as last read (0 when none waits).",
            )?)?,
            database_up: reg(r, IntGauge::new(
                "provd_fleet_database_up",
                "1 while this worker reaches the queue's database, else 0.",
            )?)?,
        })
    }
}

/// A claim and the local job running it.
struct Held {
    claim: Claim,
    local: JobId,
}

/// State shared by the fleet's threads and the API.
struct Shared {
    url: String,
    worker: String,
    config: FleetConfig,
    max_claimed: usize,
    /// Ended jobs are deleted (with their proofs) this long after they end.
    retention: Duration,
    /// Claims are ordered as the engine orders its queues (`pipeline.priority_aging_secs`).
    priority_aging: Duration,
    runner: Arc<dyn Runner>,
    metrics: FleetMetrics,
    held: Mutex<Vec<Held>>,
    /// Why the worker is unready (the database is away); `None`: ready.
    unready: Mutex<Option<String>>,
    /// Why the worker is unready for good (a fleet thread died).
    broken: Mutex<Option<String>>,
    stats: Mutex<QueueStats>,
    /// Claim nothing more (draining).
    stop: AtomicBool,
    /// Exit now, whatever is held.
    quit: AtomicBool,
    /// The API's connection (submissions, job documents, cancellation).
    api: Mutex<Option<Queue>>,
    /// The jobs clients wait on, read by the ends watcher.
    ends: ends::Ends,
}

/// A running fleet worker: its threads (claimer, heartbeat, ends watcher)
/// and the API's view of the queue.
pub struct Fleet {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Fleet {
    /// Connects, migrates the schema and starts the claimer and heartbeat.
    /// Fails (so the process does not start) if the database cannot be
    /// reached at start-up.
    pub fn start(
        url: String,
        config: FleetConfig,
        default_max_claimed: usize,
        retention: Duration,
        priority_aging: Duration,
        runner: Arc<dyn Runner>,
        registry: &Registry,
    ) -> anyhow::Result<Arc<Self>> {
        config.validate().map_err(anyhow::Error::msg)?;
        let worker = config.worker_id.clone().unwrap_or_else(default_worker_id);
        let mut queue = Queue::connect_and_migrate(&url)?;
        queue.heartbeat(&worker)?;
        for (circuit, fingerprint) in runner.circuits() {
            queue.register_circuit(&circuit, &fingerprint, &worker)?;
        }
        let metrics = FleetMetrics::register(registry)?;
        metrics.database_up.set(1);
        let shared = Arc::new(Shared {
            url,
            max_claimed: config.max_claimed.unwrap_or(default_max_claimed).max(1),
            retention,
            priority_aging,
            worker,
            config,
            runner,
            metrics,
            held: Mutex::new(Vec::new()),
            unready: Mutex::new(None),
            broken: Mutex::new(None),
            stats: Mutex::new(QueueStats::default()),
            stop: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            api: Mutex::new(Some(queue)),
            ends: ends::Ends::default(),
        });
        tracing::info!(worker = %shared.worker, max_claimed = shared.max_claimed,
            lease_s = shared.config.lease_seconds, "fleet worker joined the queue");
        // A thread that panics (a bug) leaves the worker unready with the
        // reason, rather than silently claiming nothing.
        let spawn = |name: &'static str, f: fn(&Shared)| {
            let s = shared.clone();
            std::thread::Builder::new().name(name.into()).spawn(move || {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&s))).is_err() {
                    *lock(&s.broken) = Some(format!("the fleet's {name} thread panicked (see the log)"));
                }
            })
        };
        let threads = vec![
            spawn("fleet-claimer", claimer)?,
            spawn("fleet-heartbeat", heartbeat)?,
            spawn("fleet-ends", watch_ends)?,
        ];
        Ok(Arc::new(Self { shared, threads: Mutex::new(threads) }))
    }

    pub fn worker_id(&self) -> &str {
        &self.shared.worker
    }

    /// Why this worker is unready, if it is.
    pub fn unready(&self) -> Option<String> {
        lock(&self.shared.broken).clone().or_else(|| lock(&self.shared.unready).clone())
    }

    /// The queue as last read by the heartbeat.
    pub fn stats(&self) -> QueueStats {
        *lock(&self.shared.stats)
    }

    /// Partitions this worker holds.
    pub fn claimed(&self) -> usize {
        lock(&self.shared.held).len()
    }

    /// Runs `f` on the API's connection, reconnecting first if it was lost.
    pub fn with_queue<T>(
        &self,
        f: impl FnOnce(&mut Queue) -> Result<T, QueueError>,
    ) -> Result<T, QueueError> {
        let mut api = lock(&self.shared.api);
        let out = self.shared.connected(&mut api).and_then(f);
        if matches!(out, Err(QueueError::Database(_))) {
            *api = None;
        }
        out
    }

    /// Whether a job has ended (`None`: no such job), for a client waiting
    /// on it: answered from the ends watcher's last read while it is
    /// recent, so that waiters do not queue on the API's connection.
    pub fn has_ended(&self, id: JobId) -> Result<Option<bool>, QueueError> {
        if let Some(ended) = self.shared.ends.cached(id) {
            return Ok(Some(ended));
        }
        let ended = self.with_queue(|q| q.has_ended(id))?;
        self.shared.ends.record(id, ended);
        Ok(ended)
    }

    /// Stops claiming; partitions still held are handed back when their
    /// local runs end (the drain waits for them) or when their leases run
    /// out. Returns at once; `join` waits for the threads.
    pub fn stop_claiming(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Waits up to `grace` for held partitions' results to be written, then
    /// for the threads.
    pub fn join(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.claimed() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.shared.quit.store(true, Ordering::Release);
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| "provd".into());
    format!("{host}-{}", std::process::id())
}

impl Shared {
    /// Whether the threads should exit: told to, or drained.
    fn done(&self) -> bool {
        self.quit.load(Ordering::Acquire)
            || (self.stop.load(Ordering::Acquire) && lock(&self.held).is_empty())
    }

    /// A database failure: unready until the next statement succeeds.
    fn down(&self, what: &str, e: &QueueError) {
        let reason = format!("the job queue's database is unreachable or refused a statement ({what}: {e})");
        let mut unready = lock(&self.unready);
        if unready.is_none() {
            tracing::warn!(worker = %self.worker, "{reason}; claiming nothing until it is back");
        }
        *unready = Some(reason);
        self.metrics.database_up.set(0);
    }

    fn up(&self) {
        let mut unready = lock(&self.unready);
        if unready.take().is_some() {
            tracing::info!(worker = %self.worker, "the job queue's database is reachable again");
        }
        self.metrics.database_up.set(1);
    }

    /// A connection of the thread's own, (re)made when needed.
    fn connected<'a>(&self, conn: &'a mut Option<Queue>) -> Result<&'a mut Queue, QueueError> {
        if conn.as_ref().is_none_or(Queue::is_closed) {
            *conn = Some(Queue::connect(&self.url)?);
        }
        Ok(conn.as_mut().expect("connected above"))
    }
}

/// What a local run came to, for the queue; `None` while it runs.
fn result_of(status: &JobStatus) -> Option<PartitionResult> {
    let outcome = status.outcome?;
    let p = status.partitions.first();
    Some(match (outcome, p) {
        (Outcome::Succeeded, Some(p)) if p.proof.is_some() => PartitionResult::Proved {
            proof: Box::new(p.proof.expect("checked")),
            public_inputs: p.public_inputs.clone(),
        },
        // A device fault that survived the local retries, or a run stopped
        // here (the worker draining): another worker may do better.
        (Outcome::Failed, Some(p)) if !p.faults.is_empty() => PartitionResult::Failed {
            reason: p.error.clone().unwrap_or_else(|| p.faults.join("; ")),
            retryable: true,
        },
        (Outcome::Cancelled, _) => PartitionResult::Failed {
            reason: "the worker stopped its run (draining or cancelled)".into(),
            retryable: true,
        },
        _ => PartitionResult::Failed {
            reason: p
                .and_then(|p| p.error.clone())
                .or_else(|| status.error.clone())
                .unwrap_or_else(|| "the partition failed".into()),
            retryable: false,
        },
    })
}

fn claimer(s: &Shared) {
    let mut conn: Option<Queue> = None;
    let max_attempts = s.config.max_attempts as i32;
    let poll = Duration::from_millis(s.config.poll_ms.max(1));
    let circuits: Vec<String> = s.runner.circuits().into_iter().map(|(name, _)| name).collect();
    loop {
        if s.done() {
            return;
        }
        let stopping = s.stop.load(Ordering::Acquire);
        // Results first: they free room and end jobs. A claim stays held
        // until its result is written (or fenced off), so that a database
        // outage loses none.
        let ended: Vec<(Claim, PartitionResult)> = lock(&s.held)
            .iter()
            .filter_map(|h| {
                let result = match s.runner.status(h.local) {
                    Some(status) => result_of(&status)?,
                    // Forgotten by the engine (its retention passed while the
                    // database was away): another try, anywhere.
                    None => PartitionResult::Failed {
                        reason: "its local run's record expired".into(),
                        retryable: true,
                    },
                };
                Some((h.claim.clone(), result))
            })
            .collect();
        let mut failed = false;
        for (claim, result) in ended {
            match s.connected(&mut conn).and_then(|q| q.finish(&s.worker, &claim, &result, max_attempts)) {
                Ok(written) => {
                    lock(&s.held).retain(|h| h.claim != claim);
                    match (written, &result) {
                        (Written::Taken, PartitionResult::Failed { retryable: true, .. })
                            if claim.attempt < max_attempts =>
                        {
                            s.metrics.retries.inc()
                        }
                        (Written::Fenced, _) => {
                            s.metrics.fenced.inc();
                            tracing::info!(job = %claim.job, partition = claim.index, attempt = claim.attempt,
                                "result dropped: this worker's claim no longer holds the partition");
                        }
                        _ => {}
                    }
                }
                Err(e) => {
                    s.down("writing a result", &e);
                    conn = None;
                    failed = true;
                    break;
                }
            }
        }
        // Then new claims, while there is room.
        while !failed && !stopping && lock(&s.unready).is_none() {
            if lock(&s.held).len() >= s.max_claimed || !s.runner.has_room() {
                break;
            }
            let claim = match s.connected(&mut conn).and_then(|q| {
                q.claim(&s.worker, &circuits, s.config.lease_ms(), s.priority_aging.as_millis() as i64)
            }) {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    s.down("claiming", &e);
                    conn = None;
                    break;
                }
            };
            s.metrics.claims.inc();
            let handed_back = match s.runner.run(&claim) {
                Ok(local) => {
                    lock(&s.held).push(Held { claim, local });
                    continue;
                }
                Err(RunError::Invalid(reason)) => {
                    let result = PartitionResult::Failed { reason, retryable: false };
                    s.connected(&mut conn)
                        .and_then(|q| q.finish(&s.worker, &claim, &result, max_attempts))
                        .map(drop)
                }
                Err(RunError::NotNow(reason)) => {
                    tracing::debug!(job = %claim.job, partition = claim.index, "handed back: {reason}");
                    s.connected(&mut conn).and_then(|q| q.release(&s.worker, &claim))
                }
            };
            if let Err(e) = handed_back {
                // Its lease runs out and the partition goes back to the queue.
                s.down("handing a claim back", &e);
                conn = None;
            }
            break;
        }
        s.metrics.claimed.set(lock(&s.held).len() as i64);
        std::thread::sleep(if failed { Duration::from_secs(1) } else { poll });
    }
}

fn heartbeat(s: &Shared) {
    let mut conn: Option<Queue> = None;
    let lease_ms = s.config.lease_ms();
    let max_attempts = s.config.max_attempts as i32;
    // Ended jobs past their retention go at the first beat and then every
    // minute (or every retention, if shorter); any worker may do it.
    let sweep_every = s.retention.min(Duration::from_secs(60));
    let mut swept: Option<Instant> = None;
    while !s.done() {
        let claims: Vec<(JobId, usize, i32)> =
            lock(&s.held).iter().map(|h| (h.claim.job, h.claim.index, h.claim.attempt)).collect();
        let beat = s.connected(&mut conn).and_then(|q| {
            q.heartbeat(&s.worker)?;
            let lost = q.renew(&s.worker, &claims, lease_ms)?;
            let expired = q.expire(max_attempts)?;
            if swept.is_none_or(|t| t.elapsed() >= sweep_every) {
                let gone = q.forget_ended(s.retention.as_millis() as i64)?;
                if gone > 0 {
                    tracing::debug!(jobs = gone, "ended fleet jobs past their retention deleted");
                }
                swept = Some(Instant::now());
            }
            let stats = q.stats()?;
            Ok((lost, expired, stats))
        });
        match beat {
            Ok((lost, expired, stats)) => {
                s.up();
                for (job, index) in lost {
                    let mut held = lock(&s.held);
                    if let Some(i) = held.iter().position(|h| h.claim.job == job && h.claim.index == index) {
                        let h = held.remove(i);
                        s.runner.cancel(h.local);
                        s.metrics.leases_lost.inc();
                        tracing::warn!(%job, partition = index, attempt = h.claim.attempt,
                            "this worker's claim lost its partition (lease ran out or job ended); its run is stopped");
                    }
                }
                s.metrics.expiries.inc_by(expired.requeued + expired.failed);
                s.metrics.queue.with_label_values(&["queued"]).set(stats.queued_partitions as i64);
                s.metrics.queue.with_label_values(&["claimed"]).set(stats.claimed_partitions as i64);
                s.metrics.oldest.set(stats.oldest_queued_seconds);
                *lock(&s.stats) = stats;
            }
            Err(e) => {
                s.down("heartbeat", &e);
                conn = None;
            }
        }
        // Sleep in small steps so that a stop is seen soon.
        let until = Instant::now() + s.config.heartbeat();
        while Instant::now() < until && !s.done() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Reads the ended state of the jobs clients wait on, every `poll_ms`, on a
/// connection of its own. Failures only make answers go stale, and a stale
/// answer sends the waiter to the database itself (which says why).
fn watch_ends(s: &Shared) {
    let mut conn: Option<Queue> = None;
    let poll = Duration::from_millis(s.config.poll_ms.max(1));
    while !s.quit.load(Ordering::Acquire) {
        std::thread::sleep(poll);
        if s.ends.is_empty() {
            continue;
        }
        if let Err(e) = s.connected(&mut conn).and_then(|q| s.ends.poll(q)) {
            tracing::debug!(worker = %s.worker, "reading waited-on jobs failed: {e}");
            conn = None;
        }
    }
}
