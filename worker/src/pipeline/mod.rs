//! The engine: jobs of N partitions flowing through
//! admission → synthesis → GPU queue → prove_start → prove_finish → done,
//! with memory admitted by bytes and every large buffer counted by a guard.
//!
//! Threads: one dispatcher admits queued partitions (a partition permit, then
//! a memory reservation) and hands each to a partition runner, one thread per
//! permit, which waits where the partition must wait (for its a, b and c's
//! memory, for room in the GPU queue) while the synthesis pool computes its
//! witness; synthesized partitions go into a bounded queue that one worker
//! per backend (GPU) drains; finished G1 work goes through a second bounded
//! queue to the finalize threads, so a slow G2 stage holds the GPU back
//! instead of piling up pending partitions.
//!
//! Every queue serves the most urgent job's partitions first (the `lanes` module).
//! Critical work has a lane of its own beside that order: a dispatcher with
//! its own permits, a synthesis pool, a finalize thread, memory the other
//! classes leave free (`Budget::headroom`), and a place in the bounded
//! queues that their bound never refuses. So a critical partition waits for
//! the partitions already on its device, never behind a queue of others.
//! Two memory rules:
//! 1. a partition's permit is released only once the GPU queue has accepted
//!    its buffers (see `synthesize_partition`);
//! 2. gauges follow ownership: guards, never hand-kept counters.

pub mod buffers;
pub mod config;
pub mod devices;
mod job;
mod lanes;
pub mod memory;
mod table;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::backend::{Backend, ProductsPlacement};
use crate::groth16::AbcHold;
pub use crate::groth16::{AbcFrom, SynthesisFn, WitnessCheck};
use crate::groth16::{Blinding, HostProducts, PendingProof, ProveError, ProvingKey, Synthesized};
pub use crate::telemetry::labels::{Door, Outcome, Priority, Stage};
use crate::telemetry::labels::{FailureReason, WaitQueue};
use crate::telemetry::Metrics;
use buffers::{BufferClass, BufferGuard, Ledger};
pub use config::{MemoryBudget, PipelineConfig};
use devices::Device;
pub use devices::DeviceStatus;
pub use job::{
    now_ms, EndedJob, EndedPartition, JobId, JobObserver, JobSpec, JobStatus, PartitionStatus,
    ProvedPartition, StageTimes,
};
use job::{Job, Ticket};
use lanes::{Handoff, Ranked, RecvError, Takes};
use memory::{Budget, Promised, Reservation};
use table::JobTable;

/// Counts a partition in one stage for as long as it lives.
struct InStage(prometheus::IntGauge);

impl InStage {
    fn enter(s: &Shared, stage: Stage) -> Self {
        let g = s.metrics.partitions_in_stage.with_label_values(&[stage.name()]);
        g.inc();
        Self(g)
    }
}

impl Drop for InStage {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Estimated bytes of one partition of a circuit, by what frees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// a/b/c evaluations, padded to the domain: freed when the backend is
    /// done with them (a GPU's once copied, the CPU's once H is made).
    pub abc: u64,
    /// Input and aux assignments.
    pub aux: u64,
    /// Density bitmaps.
    pub density: u64,
    /// Host working memory of prove_start and prove_finish (on the CPU, H's
    /// coefficients and filtered scalars; [`Backend::host_working_bytes`]).
    pub working: u64,
}

impl Footprint {
    /// From the key, before any synthesis, as the CPU prover holds it: the
    /// most any backend does. The engine admits partitions by its devices'
    /// own ([`Engine::footprint`]).
    pub fn of(key: &ProvingKey) -> Self {
        let n = key.domain_size() as u64;
        let vars = (key.vk.ic.len() + key.l.len()) as u64;
        let working = crate::backend::cpu_working_bytes(key);
        Self { abc: 3 * n * 32, aux: vars * 32, density: 3 * vars.div_ceil(8), working }
    }

    pub fn total(&self) -> u64 {
        self.abc + self.aux + self.density + self.working
    }
}

/// Why a job was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("a job needs at least one partition")]
    Empty,
    #[error(
        "one partition of {circuit} needs an estimated {need} bytes, more than the whole memory budget of {budget} bytes; \
         raise pipeline.memory_budget or use a smaller circuit"
    )]
    NeverFits { circuit: String, need: u64, budget: u64 },
    #[error(
        "one partition of {circuit} needs an estimated {need} bytes; of the {room} bytes of memory budget the keys \
         leave, {headroom} are kept for critical work, so a {} job of it can never run: submit it as critical, \
         lower pipeline.critical_headroom or raise pipeline.memory_budget",
        priority.name()
    )]
    NeverFitsBesideHeadroom { circuit: String, priority: Priority, need: u64, room: u64, headroom: u64 },
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// Why received witnesses cannot be held in memory.
#[derive(Debug, thiserror::Error)]
pub enum WitnessDoesNotFit {
    #[error(
        "{need} bytes of witnesses and one partition's estimated {footprint} bytes exceed the {room} bytes \
         of memory budget the resident keys leave; raise pipeline.memory_budget"
    )]
    Never { need: u64, footprint: u64, room: u64 },
    #[error(
        "{need} bytes of witnesses do not fit in the memory budget now ({free} bytes free, of which \
         {footprint} are kept for a partition to run); retry later"
    )]
    NotNow { need: u64, free: u64, footprint: u64 },
}

/// Why a key could not be held resident against the memory budget.
#[derive(Debug, thiserror::Error)]
#[error(
    "the key of {circuit} takes {need} bytes, but only {free} of the memory budget's {budget} bytes are free \
     (keys count against pipeline.memory_budget); raise the budget or serve fewer circuits"
)]
pub struct KeyDoesNotFit {
    pub circuit: String,
    pub need: u64,
    pub free: u64,
    pub budget: u64,
}

// The partition values below hold their Ticket as their *last* field: fields
// drop in declaration order, so a partition dropped whole (a closed channel,
// a cancelled job) releases its guards and stage gauge before the ticket ends
// it, and a job is never seen ended while its gauges still count it. Code
// that takes one apart drops the guards first (pattern bindings drop in
// reverse, so binding the ticket first does it).

/// A partition waiting for admission.
struct Queued {
    attempt: Attempt,
    ticket: Ticket,
}

/// How to make a partition's witness, and which try this is (1 first), so
/// that a device fault can send it round again.
#[derive(Clone)]
struct Attempt {
    synthesize: SynthesisFn,
    number: u32,
    /// Where this try computes a, b and c still to compute, if it must: on
    /// the host after a device had no room for the matrices. `None`: as the
    /// devices place them ([`Shared::products`]).
    products: Option<ProductsPlacement>,
}

/// A synthesized partition in the GPU queue, its buffers under guard (a,
/// b and c's in the witness, [`Synthesized::abc_hold`], for the backend to
/// drop when it frees them).
struct InGpuQueue {
    witness: Synthesized,
    held: Held,
    stage: InStage,
    enqueued: Instant,
    attempt: Attempt,
    ticket: Ticket,
}

/// A partition between prove_start and prove_finish.
struct ToFinish {
    device: Arc<Device>,
    pending: PendingProof,
    held: Held,
    pending_guard: BufferGuard,
    stage: InStage,
    attempt: Attempt,
    ticket: Ticket,
}

/// Guards that live until prove_finish is done.
struct Held {
    _aux: BufferGuard,
    _density: BufferGuard,
}

struct Shared {
    config: PipelineConfig,
    metrics: Arc<Metrics>,
    ledger: Arc<Ledger>,
    budget: Arc<Budget>,
    /// Partitions waiting for admission, most urgent first.
    queue: Mutex<Ranked<Queued>>,
    queued: Condvar,
    permits: Arc<Semaphore>,
    /// The critical lane's permits, beside `permits`.
    critical_permits: Arc<Semaphore>,
    gpu_queue: Handoff<InGpuQueue>,
    finalize_queue: Handoff<ToFinish>,
    synthesis_pool: rayon::ThreadPool,
    /// Critical partitions' synthesis, so that it never waits for a thread
    /// of the shared pool (it shares the cores with it).
    critical_pool: rayon::ThreadPool,
    shutdown: AtomicBool,
    /// Draining: no new jobs, accepted ones run on.
    shutdown_requested: AtomicBool,
    jobs: JobTable,
    /// Told of every partition's and job's end.
    observer: Option<Arc<dyn JobObserver>>,
    devices: Vec<Arc<Device>>,
    /// Engine threads that died (a panic outside the stage code, which
    /// catches its own): the engine can no longer be trusted to move work,
    /// so the worker reports itself unready with the reason.
    dead_threads: Mutex<Vec<String>>,
}

impl Shared {
    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Ranked<Queued>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Updates the admission queue's gauges.
    fn note_queued(&self, q: &Ranked<Queued>) {
        self.metrics.partitions_waiting.set(q.len() as i64);
        for p in Priority::ALL {
            self.metrics.partitions_queued.with_label_values(&[p.name()]).set(q.len_of(p) as i64);
        }
    }

    /// Updates the GPU queue's depth gauges.
    fn note_gpu_queue(&self) {
        let (depth, by) = self.gpu_queue.depth();
        self.metrics.gpu_queue_depth.set(depth as i64);
        for p in Priority::ALL {
            self.metrics.gpu_queue_depth_by_priority.with_label_values(&[p.name()]).set(by[p.rank()] as i64);
        }
    }

    /// A partition of `key`'s circuit as these devices hold it: the working
    /// memory of whichever needs the most.
    fn footprint(&self, key: &ProvingKey) -> Footprint {
        let most = Footprint::of(key);
        let working = self.devices.iter().map(|d| d.backend.host_working_bytes(key)).max();
        Footprint { working: working.unwrap_or(most.working), ..most }
    }

    /// Host bytes a partition of `key`'s circuit reserves when its a, b and
    /// c come from `abc_from` and are computed at `placement`: its
    /// [`Footprint`], less a, b and c where synthesis leaves them to a
    /// device (there they never take host memory; should the device have no
    /// room for them after all, the partition goes round again on the host,
    /// reserving them then), and when ([`AbcReserved`]).
    fn admission(&self, key: &ProvingKey, abc_from: AbcFrom, placement: ProductsPlacement) -> Admission {
        let fp = self.footprint(key);
        let rest = fp.total() - fp.abc;
        let (now, later) = match AbcReserved::of(abc_from, placement) {
            AbcReserved::AtAdmission => (fp.total(), 0),
            AbcReserved::BeforeProducts => (rest, self.host_products().bytes_of(fp.abc)),
            AbcReserved::Never => (rest, 0),
        };
        Admission { now, later }
    }

    /// What the devices take of a, b and c computed on the host: a and b
    /// alone where every backend makes c as a·b itself, else all three.
    fn host_products(&self) -> HostProducts {
        let all_ab = !self.devices.is_empty()
            && self.devices.iter().all(|d| d.backend.host_products() == HostProducts::Ab);
        if all_ab {
            HostProducts::Ab
        } else {
            HostProducts::Abc
        }
    }

    /// Whether a partition of `job` tried as `attempt` reached its device
    /// with its witness unchecked: c left as a·b on the host
    /// ([`HostProducts::Ab`]).
    fn left_unchecked(&self, job: &Job, attempt: &Attempt) -> bool {
        job.abc_from == AbcFrom::Matrices
            && attempt.products == Some(ProductsPlacement::Cpu)
            && self.host_products() == HostProducts::Ab
    }

    /// Where `key`'s a, b and c still to compute are computed: on the
    /// devices where every backend does so there, otherwise at the end of
    /// synthesis.
    fn products(&self, key: &ProvingKey) -> ProductsPlacement {
        if !self.devices.is_empty()
            && self.devices.iter().all(|d| d.backend.products(key) == ProductsPlacement::Gpu)
        {
            ProductsPlacement::Gpu
        } else {
            ProductsPlacement::Cpu
        }
    }
}

/// When a partition reserves host bytes for its a, b and c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AbcReserved {
    /// At admission: synthesis evaluates them as it goes.
    AtAdmission,
    /// Once its witness is done, before they are computed on the host from
    /// the circuit's matrices: promised at admission ([`memory::Promise`]),
    /// so that the partitions still making their witnesses do not hold
    /// them meanwhile (a 32 GiB partition's are 11.65 GiB, three times its
    /// witness).
    BeforeProducts,
    /// Never: a device computes them.
    Never,
}

impl AbcReserved {
    fn of(abc_from: AbcFrom, placement: ProductsPlacement) -> Self {
        match (abc_from, placement) {
            (AbcFrom::Synthesis, _) => AbcReserved::AtAdmission,
            (AbcFrom::Matrices, ProductsPlacement::Cpu) => AbcReserved::BeforeProducts,
            (AbcFrom::Matrices, ProductsPlacement::Gpu) => AbcReserved::Never,
        }
    }
}

/// What a partition reserves at admission, and what it is promised for
/// later (its a, b and c, [`AbcReserved::BeforeProducts`]).
#[derive(Clone, Copy, Debug)]
struct Admission {
    now: u64,
    later: u64,
}

impl Admission {
    /// Everything it will hold at once.
    fn total(&self) -> u64 {
        self.now + self.later
    }
}

/// An engine thread's loop.
type ThreadLoop = Box<dyn FnOnce(&Arc<Shared>) + Send>;

/// Runs an engine thread's loop; if it panics, records the thread in `dead`
/// (see [`Engine::dead_threads`]) instead of letting work wait on it unseen.
fn guarded(dead: &Mutex<Vec<String>>, name: &str, run: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        let what = crate::telemetry::logging::panic_message(&*panic);
        tracing::error!(thread = %name, "an engine thread died: {what}; the worker reports itself unready");
        dead.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{name} ({what})"));
    }
}

/// The proving engine. Dropping it stops its threads after cancelling
/// whatever is still queued.
pub struct Engine {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine with one worker per backend.
    pub fn start(
        config: PipelineConfig,
        backends: Vec<Arc<dyn Backend>>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        Self::start_observed(config, backends, metrics, None)
    }

    /// As [`Engine::start`], telling `observer` of every partition's and
    /// job's end as it happens.
    pub fn start_observed(
        config: PipelineConfig,
        backends: Vec<Arc<dyn Backend>>,
        metrics: Arc<Metrics>,
        observer: Option<Arc<dyn JobObserver>>,
    ) -> anyhow::Result<Self> {
        config.validate().map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!backends.is_empty(), "the engine needs at least one backend");
        let aging = config.priority_aging();
        metrics.gpu_queue_capacity.set(config.gpu_queue_capacity as i64);
        let pool = |name: &'static str, n: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(move |i| format!("{name}-{i}"))
                // A panic in a task of the pool is counted and logged by the
                // panic hook; without a handler, rayon would abort the process.
                .panic_handler(|_| {})
                .build()
        };
        let shared = Arc::new(Shared {
            ledger: Ledger::new(metrics.clone()),
            budget: Budget::new(config.budget_bytes(), metrics.clone()),
            queue: Mutex::new(Ranked::new(aging)),
            queued: Condvar::new(),
            permits: Arc::new(Semaphore::new(
                config.partition_permits,
                &metrics.partition_permits,
                metrics.partition_permits_in_use.clone(),
            )),
            critical_permits: Arc::new(Semaphore::new(
                config.critical_permits,
                &metrics.critical_permits,
                metrics.critical_permits_in_use.clone(),
            )),
            gpu_queue: Handoff::new(config.gpu_queue_capacity, aging),
            finalize_queue: Handoff::new(config.finalize_threads, aging),
            synthesis_pool: pool("synth", config.synthesis_threads())?,
            critical_pool: pool("synth-critical", config.synthesis_threads())?,
            shutdown: AtomicBool::new(false),
            shutdown_requested: AtomicBool::new(false),
            jobs: JobTable::default(),
            observer,
            devices: backends.iter().map(|b| Device::new(b.clone(), metrics.clone())).collect(),
            dead_threads: Mutex::new(Vec::new()),
            config,
            metrics,
        });
        let mut threads = Vec::new();
        let spawn = |name: String, run: ThreadLoop| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || guarded(&s.dead_threads, &name, || run(&s)))
        };
        // Each dispatcher's runners, one per permit of its lane: an admitted
        // partition holds a permit until it leaves its runner, so none waits
        // for one. They end once their dispatcher (the sender) has.
        let lanes = [
            (Takes::All, "dispatch", "partition", shared.config.partition_permits),
            (Takes::CriticalOnly, "dispatch-critical", "partition-crit", shared.config.critical_permits),
        ];
        for (takes, dispatcher, runner, permits) in lanes {
            if permits == 0 {
                continue;
            }
            let (admitted, runs) = crossbeam_channel::unbounded::<Admitted>();
            for i in 0..permits {
                let runs = runs.clone();
                threads.push(spawn(format!("{runner}-{i}"), Box::new(move |s| run_partitions(s, runs)))?);
            }
            threads.push(spawn(dispatcher.into(), Box::new(move |s| dispatch(s, takes, admitted)))?);
        }
        for i in 0..shared.config.finalize_threads {
            threads.push(spawn(format!("finalize-{i}"), Box::new(|s| finalizer(s, Takes::All)))?);
        }
        threads.push(spawn("finalize-critical".into(), Box::new(|s| finalizer(s, Takes::CriticalOnly)))?);
        for device in shared.devices.clone() {
            shared.metrics.proofs_invalid.with_label_values(&[device.name()]);
            // One worker per partition the backend takes at once.
            for slot in 0..device.backend.partitions_in_flight().count() {
                let device = device.clone();
                let name = format!("gpu-{}-{slot}", device.name());
                threads.push(spawn(name, Box::new(move |s| gpu_worker(s, device)))?);
            }
        }
        shared.note_queued(&shared.lock_queue());
        shared.note_gpu_queue();
        Ok(Self { shared, threads })
    }

    /// Accepts a job under a new id; its partitions queue for admission in order.
    pub fn submit(&self, spec: JobSpec) -> Result<JobId, SubmitError> {
        let id = JobId::new();
        self.submit_as(id, spec, Vec::new())?;
        Ok(id)
    }

    /// Whether a job like `spec` would be accepted now: a caller that must
    /// record a job before it runs (a journal) asks first.
    pub fn check(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        let s = &self.shared;
        if s.shutdown.load(Ordering::Acquire) || s.shutdown_requested.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        if spec.partitions.is_empty() {
            return Err(SubmitError::Empty);
        }
        let need = s.admission(&spec.key, spec.abc_from, s.products(&spec.key)).total();
        let room = s.budget.total() - s.budget.resident();
        if need > room {
            return Err(SubmitError::NeverFits { circuit: spec.circuit.clone(), need, budget: room });
        }
        let headroom = s.budget.headroom();
        if spec.priority != Priority::Critical && need + headroom > room {
            return Err(SubmitError::NeverFitsBesideHeadroom {
                circuit: spec.circuit.clone(),
                priority: spec.priority,
                need,
                room,
                headroom,
            });
        }
        Ok(())
    }

    /// Accepts a job under `id` (one [`Engine::check`] passed, or one run
    /// again after a restart); the partitions in `proved` keep their proofs
    /// and are not queued. Checked again here: the engine may have begun to
    /// drain since the caller's check.
    pub fn submit_as(
        &self,
        id: JobId,
        spec: JobSpec,
        proved: Vec<ProvedPartition>,
    ) -> Result<(), SubmitError> {
        self.check(&spec)?;
        let s = &self.shared;
        let job = Job::new(id, &spec, s.metrics.clone(), s.observer.clone());
        let kept = proved.len();
        job.restore_proved(proved);
        s.jobs.insert(job.clone());
        let partitions = spec.partitions.len();
        let mut q = s.lock_queue();
        for (i, synthesize) in spec.partitions.into_iter().enumerate() {
            if !job.is_pending(i) {
                continue;
            }
            q.push(
                job.priority,
                Queued {
                    ticket: Ticket::new(job.clone(), i),
                    attempt: Attempt { synthesize, number: 1, products: None },
                },
            );
        }
        s.note_queued(&q);
        drop(q);
        s.queued.notify_all();
        tracing::info!(job = %id, circuit = %job.circuit, priority = job.priority.name(), partitions,
            proved_before_restart = kept, "job accepted");
        Ok(())
    }

    /// How the job ended (`Some(None)` while it runs), without copying its
    /// partitions; `None` for an unknown job.
    pub fn outcome(&self, id: JobId) -> Option<Option<Outcome>> {
        self.job(id).map(|j| j.outcome())
    }

    /// What one partition of `key`'s circuit reserves against the memory
    /// budget on these devices (a job whose partition can never fit is
    /// refused).
    pub fn footprint(&self, key: &ProvingKey) -> Footprint {
        self.shared.footprint(key)
    }

    /// Host bytes a partition of `key`'s circuit, its a, b and c from
    /// `abc_from`, reserves when it is admitted now, at most at once: its
    /// footprint, less a, b and c where the devices compute them (where the
    /// host computes them after the witness, part of this is reserved only
    /// then).
    pub fn admission_bytes(&self, key: &ProvingKey, abc_from: AbcFrom) -> u64 {
        let s = &self.shared;
        s.admission(key, abc_from, s.products(key)).total()
    }

    pub fn status(&self, id: JobId) -> Option<JobStatus> {
        self.job(id).map(|j| j.status())
    }

    /// Waits for a job to end; `None` if there is no such job.
    pub fn wait(&self, id: JobId, timeout: Option<Duration>) -> Option<JobStatus> {
        self.job(id).map(|j| j.wait(timeout))
    }

    /// Cancels a job: queued partitions are dropped (releasing their memory),
    /// running ones stop at their next stage boundary. Returns false if unknown.
    pub fn cancel(&self, id: JobId) -> bool {
        let Some(job) = self.job(id) else { return false };
        job.cancel();
        // Drop its queued partitions now, so their tickets end and nothing waits.
        let mut q = self.shared.lock_queue();
        let dropped = q.remove_where(|p| p.ticket.job.id == id);
        self.shared.note_queued(&q);
        drop(q);
        drop(dropped);
        true
    }

    /// Partitions accepted but not yet admitted to synthesis.
    pub fn queued_partitions(&self) -> usize {
        self.shared.lock_queue().len()
    }

    /// Partitions accepted but not yet admitted, by priority (lowest first).
    pub fn queued_by_priority(&self) -> [usize; 4] {
        let q = self.shared.lock_queue();
        Priority::ALL.map(|p| q.len_of(p))
    }

    /// Keeps `bytes` of the memory budget free of every class but critical
    /// (see `pipeline.critical_headroom`), from now on.
    pub fn keep_for_critical(&self, bytes: u64) {
        self.shared.budget.set_headroom(bytes);
    }

    /// The most recent jobs, newest first.
    pub fn recent_jobs(&self, n: usize) -> Vec<JobStatus> {
        self.shared.jobs.recent(n).iter().map(|j| j.status()).collect()
    }

    /// Jobs not yet ended.
    pub fn unfinished_jobs(&self) -> Vec<JobId> {
        self.shared.jobs.unfinished().iter().map(|j| j.id).collect()
    }

    /// The states of the jobs that have not ended.
    pub fn unfinished_statuses(&self) -> Vec<JobStatus> {
        self.shared.jobs.unfinished().iter().map(|j| j.status()).collect()
    }

    /// Forgets ended jobs older than `age` (their results are no longer
    /// served); returns their ids.
    pub fn forget_ended(&self, age: Duration) -> Vec<JobId> {
        self.shared.jobs.forget_ended(age)
    }

    /// Serves a job that ended before a restart until it expires.
    pub fn restore_ended(&self, ended: EndedJob, key: Arc<ProvingKey>) {
        self.shared.jobs.insert(Job::restored(ended, key, self.shared.metrics.clone()));
    }

    /// Holds `bytes` of a resident key against the memory budget for as long
    /// as the returned reservation lives; partitions are admitted against
    /// what is left.
    pub fn hold_key(&self, circuit: &str, bytes: u64) -> Result<Reservation, KeyDoesNotFit> {
        let b = &self.shared.budget;
        b.reserve_resident(bytes).ok_or_else(|| KeyDoesNotFit {
            circuit: circuit.to_string(),
            need: bytes,
            free: b.total().saturating_sub(b.reserved()),
            budget: b.total(),
        })
    }

    /// Stops taking jobs, waits up to `grace` for accepted ones, then cancels
    /// the rest and waits for them to end. Returns (finished, cancelled).
    pub fn drain(&self, grace: Duration) -> (usize, usize) {
        self.shared.shutdown_requested.store(true, Ordering::Release);
        let deadline = Instant::now() + grace;
        let pending = self.unfinished_jobs();
        let mut cancelled = 0;
        for id in &pending {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.wait(*id, Some(left)).is_some_and(|s| s.outcome.is_none()) {
                self.cancel(*id);
                cancelled += 1;
            }
        }
        for id in &pending {
            self.wait(*id, None);
        }
        (pending.len() - cancelled, cancelled)
    }

    fn job(&self, id: JobId) -> Option<Arc<Job>> {
        self.shared.jobs.get(id)
    }

    /// Holds `bytes` of received witnesses against the budget now, leaving
    /// room for a partition of `key`'s circuit to run ([`Engine::footprint`])
    /// beside the memory kept for critical work.
    pub fn hold_witness(
        &self,
        bytes: u64,
        key: &ProvingKey,
    ) -> Result<memory::HeldWitness, WitnessDoesNotFit> {
        let budget = &self.shared.budget;
        let footprint = self.footprint(key).total() + budget.headroom();
        let room = budget.total() - budget.resident();
        if bytes + footprint > room {
            return Err(WitnessDoesNotFit::Never { need: bytes, footprint, room });
        }
        let reservation = budget.try_reserve(bytes, footprint).ok_or_else(|| WitnessDoesNotFit::NotNow {
            need: bytes,
            free: budget.total().saturating_sub(budget.reserved()),
            footprint,
        })?;
        Ok(memory::HeldWitness::new(reservation, self.shared.metrics.clone()))
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.shared.ledger
    }

    pub fn budget(&self) -> &Arc<Budget> {
        &self.shared.budget
    }

    pub fn config(&self) -> &PipelineConfig {
        &self.shared.config
    }

    /// Every device and whether it is in service.
    pub fn devices(&self) -> Vec<DeviceStatus> {
        self.shared.devices.iter().map(|d| d.status()).collect()
    }

    /// Why no device takes work, or `None` while one does.
    pub fn none_in_service(&self) -> Option<String> {
        devices::none_in_service(&self.shared.devices)
    }

    /// Engine threads that died, with why; empty while all run.
    pub fn dead_threads(&self) -> Vec<String> {
        self.shared.dead_threads.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let s = &self.shared;
        s.shutdown.store(true, Ordering::Release);
        let ids: Vec<JobId> = s.jobs.all().iter().map(|j| j.id).collect();
        for id in ids {
            self.cancel(id);
        }
        s.queued.notify_all();
        s.permits.close();
        s.critical_permits.close();
        s.gpu_queue.close();
        s.finalize_queue.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Emits one event carrying every class count and the reserved bytes, so
/// that a log alone replays the timeline.
fn transition(s: &Shared, job: JobId, partition: usize, stage: &'static str) {
    let c = s.ledger.counts();
    tracing::debug!(
        target: "provd::buffers",
        job = %job, partition, stage,
        synth = c.synth, abc = c.abc, aux = c.aux, density = c.density, pending = c.pending,
        reserved_gib = s.budget.reserved() as f64 / (1u64 << 30) as f64,
        "BUFFERS[{stage}]"
    );
}

/// A partition admitted to synthesis, with what admission gave it.
struct Admitted {
    queued: Queued,
    permit: Permit,
    reservation: Reservation,
    promise: memory::Promise,
}

/// Admits the partitions `takes` serves and hands them to its partition
/// runners (`runners`): the most urgent first, once a permit and its memory
/// are free. One dispatcher serves every class (critical first) with
/// `pipeline.partition_permits`; the critical lane's serves critical work
/// only, with its own permits.
///
/// The partition is chosen only once a permit is held and its memory fits,
/// so work that arrives meanwhile is served by its class, not behind
/// whatever happened to be first when the dispatcher began to wait.
fn dispatch(s: &Arc<Shared>, takes: Takes, runners: crossbeam_channel::Sender<Admitted>) {
    let permits = match takes {
        Takes::All => &s.permits,
        Takes::CriticalOnly => &s.critical_permits,
    };
    let stopped = || s.shutdown.load(Ordering::Acquire);
    loop {
        // Wait for work before taking a permit, so that an idle lane holds none.
        let mut q = s.lock_queue();
        while q.peek(takes).is_none() {
            if stopped() {
                return;
            }
            q = s.queued.wait_timeout(q, Duration::from_millis(200)).unwrap_or_else(|e| e.into_inner()).0;
        }
        drop(q);
        let Some(permit) = permits.acquire() else { return };
        let mut cancelled = Vec::new();
        let admitted = loop {
            let mut q = s.lock_queue();
            if stopped() {
                return;
            }
            let Some((priority, next)) = q.peek(takes) else { break None };
            if next.ticket.job.is_cancelled() {
                cancelled.extend(q.pop(takes));
                continue;
            }
            // Every class but critical leaves the critical lane's headroom
            // free, and the memory promised to partitions begun.
            let (keep_free, promised) = match priority {
                Priority::Critical => (0, Promised::MayTake),
                _ => (s.budget.headroom(), Promised::LeaveFree),
            };
            // The placement is fixed here, with the bytes reserved for it.
            let job = &next.ticket.job;
            let placement = next.attempt.products.unwrap_or_else(|| s.products(&job.key));
            let need = s.admission(&job.key, job.abc_from, placement);
            if let Some(reserved) = s.budget.try_reserve_promising(need.now, need.later, keep_free, promised)
            {
                let popped = q.pop(takes).map(|(p, mut item, waited)| {
                    item.attempt.products = Some(placement);
                    (p, item, waited, reserved)
                });
                s.note_queued(&q);
                break popped;
            }
            // Not enough memory yet: look again (the most urgent partition
            // may have changed) when the queue changes or a little later.
            drop(s.queued.wait_timeout(q, Duration::from_millis(20)).unwrap_or_else(|e| e.into_inner()));
        };
        // Cancelled partitions end (their tickets drop) outside the queue's lock.
        drop(cancelled);
        let Some((priority, next, waited, (reservation, promise))) = admitted else { continue };
        s.metrics
            .partition_wait
            .with_label_values(&[priority.name(), WaitQueue::Admission.name()])
            .observe(waited.as_secs_f64());
        // As many runners as permits: the partition waits for none. A send
        // fails only where every runner has died (the engine is unready).
        if runners.send(Admitted { queued: next, permit, reservation, promise }).is_err() {
            return;
        }
    }
}

/// A partition runner: synthesizes the partitions its dispatcher admits, one
/// at a time, until the dispatcher ends.
///
/// A partition waits on this thread, never on a thread of the synthesis
/// pool: a pool thread waiting inside one partition's parallel work (its a,
/// b and c computed from the matrices) runs other tasks of the pool
/// meanwhile, and a partition begun there, waiting for the memory the one
/// beneath it holds, would never let it finish.
fn run_partitions(s: &Arc<Shared>, admitted: crossbeam_channel::Receiver<Admitted>) {
    for a in admitted {
        synthesize_partition(s, a);
    }
}

fn synthesize_partition(s: &Shared, admitted: Admitted) {
    let Admitted { queued: Queued { ticket, attempt }, permit, mut reservation, promise } = admitted;
    let (job, index) = (ticket.job.clone(), ticket.index);
    let fp = s.footprint(&job.key);
    let products = attempt.products.unwrap_or_else(|| s.products(&job.key));
    // What a, b and c will hold on the host (see `Shared::admission`).
    let when = AbcReserved::of(job.abc_from, products);
    let host = s.host_products();
    let abc_reserved_bytes = match when {
        AbcReserved::AtAdmission => fp.abc,
        AbcReserved::BeforeProducts => host.bytes_of(fp.abc),
        AbcReserved::Never => 0,
    };
    // A witness grows as it is synthesized, unseen by any buffer; counted
    // at what it will hold once done, so that the gauges cover the memory
    // of partitions in synthesis (a 32 GiB partition's is ~4 GiB): its a, b
    // and c too once they are reserved.
    let abc_in_synth = if when == AbcReserved::AtAdmission { fp.abc } else { 0 };
    let mut synth = s.ledger.guard(BufferClass::Synth, fp.aux + fp.density + abc_in_synth, None);
    let in_stage = InStage::enter(s, Stage::Synthesis);
    job.set_stage(index, Stage::Synthesis);
    job.record(index, |t| {
        t.queued.get_or_insert(job.created().elapsed().as_secs_f64());
    });
    transition(s, job.id, index, "synthesis start");
    // The synthesis and the products are computed on the pool, which shares
    // the cores between partitions; this thread waits for them.
    let pool = if job.priority == Priority::Critical { &s.critical_pool } else { &s.synthesis_pool };
    let t = Instant::now();
    let made =
        pool.install(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (attempt.synthesize)())));
    // a, b and c's part of the reservation: split off what admission
    // reserved, or, promised, reserved now that the witness is made.
    let mut waited = Duration::ZERO;
    let abc_reserved = match (&made, when) {
        (Ok(Ok(_)), AbcReserved::BeforeProducts) => {
            let since = Instant::now();
            let keep_free = if job.priority == Priority::Critical { 0 } else { s.budget.headroom() };
            let stop = || job.is_cancelled() || s.shutdown.load(Ordering::Acquire);
            let Some(r) = promise.redeem(keep_free, Duration::from_millis(200), stop) else {
                // Cancelled: the guards go first, then the ticket ends it so.
                drop((synth, in_stage, reservation, made, permit));
                return;
            };
            waited = since.elapsed();
            synth.grow(abc_reserved_bytes);
            s.metrics
                .partition_wait
                .with_label_values(&[job.priority.name(), WaitQueue::Products.name()])
                .observe(waited.as_secs_f64());
            transition(s, job.id, index, "a, b, c reserved");
            r
        }
        _ => reservation.split(abc_reserved_bytes),
    };
    let result = made.and_then(|made| {
        pool.install(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                made.and_then(|w| products.ready(w, host))
            }))
        })
    });
    let secs = (t.elapsed() - waited).as_secs_f64();
    s.metrics.stage_duration.with_label_values(&[&job.circuit, Stage::Synthesis.name()]).observe(secs);
    job.record(index, |t| t.synthesis = Some(secs));
    // Every guard is dropped before the ticket ends the partition, so that a
    // job is never seen ended while its gauges still count it.
    let mut witness = match result {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => {
            let holding = (synth, in_stage, reservation, abc_reserved, permit, attempt);
            return ticket.fail_after(holding, e.reason(), e.to_string());
        }
        Err(_) => {
            let holding = (synth, in_stage, reservation, abc_reserved, permit, attempt);
            return ticket.fail_after(holding, FailureReason::Panic, "synthesis panicked".into());
        }
    };
    if job.is_cancelled() {
        // Every guard goes before the ticket, which ends it as cancelled.
        drop((witness, synth, in_stage, reservation, abc_reserved, permit));
        return;
    }
    // a, b and c left to the device take no host memory: whatever part of
    // the reservation held them (none where admission knew they would be
    // left there) goes now, not when prove_start returns. Should the device
    // have no room for the matrices after all, the witness refuses to compute
    // them on the host, unreserved (`ProveError::NoRoomForProducts`), and the
    // partition goes round again with a, b, c computed in synthesis.
    let abc_reserved = if witness.release_host_products() {
        drop(abc_reserved);
        None
    } else {
        Some(abc_reserved)
    };
    let abc_bytes = witness.abc_host_bytes() as u64;
    if abc_bytes > abc_reserved_bytes {
        // A kind that said it leaves a, b and c to the matrices evaluated
        // them: the gauges count them, the budget did not.
        tracing::warn!(job = %job.id, partition = index, circuit = %job.circuit, abc_bytes,
            "synthesis evaluated a, b and c that its circuit kind said it leaves to the matrices: held unreserved");
    }
    let vars = (witness.input_assignment.len() + witness.aux_assignment.len()) as u64;
    let density_bytes = (witness.a_aux_density.heap_bytes()
        + witness.b_aux_density.heap_bytes()
        + witness.b_input_density.heap_bytes()) as u64;
    // The a/b/c part of the reservation goes with the a/b/c buffers, into
    // the witness, for the backend to drop as it frees them; the rest
    // (assignment, density, working memory) with the assignment. The witness
    // leaves `synth` as these take it over: never counted twice.
    drop(synth);
    witness.abc_hold = AbcHold::new(s.ledger.guard(BufferClass::Abc, abc_bytes, abc_reserved));
    let held = Held {
        _aux: s.ledger.guard(BufferClass::Aux, vars * 32, Some(reservation)),
        _density: s.ledger.guard(BufferClass::Density, density_bytes, None),
    };
    drop(in_stage);
    job.set_stage(index, Stage::GpuQueue);
    transition(s, job.id, index, "synthesis end");
    let stage = InStage::enter(s, Stage::GpuQueue);
    let item = InGpuQueue { ticket, witness, held, stage, enqueued: Instant::now(), attempt };
    // Rule 1: the permit is held while this blocks on a full queue, so at most
    // `partition_permits` synthesized partitions wait in front of it. (Dropping
    // the permit before this send would let every synthesis thread stack its
    // finished buffers here, unbounded by the permits.)
    if s.gpu_queue.send(job.priority, item).is_err() {
        return; // engine stopped: the item, and so its guards, are dropped
    }
    s.note_gpu_queue();
    drop(permit);
    transition(s, job.id, index, "gpu hand-off");
}

fn gpu_worker(s: &Arc<Shared>, device: Arc<Device>) {
    let backend = device.backend.clone();
    let thread_busy = s.metrics.prove_start_thread_seconds.with_label_values(&[backend.name()]);
    loop {
        // Out of service: stop taking work while another device can, or, the
        // last one out, fail what still arrives (nothing waits forever).
        let last_out = if device.in_service() { None } else { devices::none_in_service(&s.devices) };
        if !device.in_service() && last_out.is_none() {
            return;
        }
        let (priority, item, _) = match s.gpu_queue.recv_timeout(Takes::All, Duration::from_millis(200)) {
            Ok(got) => got,
            Err(RecvError::Timeout) if !s.shutdown.load(Ordering::Acquire) => continue,
            Err(_) => return,
        };
        s.note_gpu_queue();
        let InGpuQueue { ticket, witness, held, stage, enqueued, attempt } = item;
        drop(stage);
        let (job, index) = (ticket.job.clone(), ticket.index);
        if let Some(why) = last_out {
            ticket.fail_after((witness, held, attempt), FailureReason::Backend, why);
            continue;
        }
        let waited = enqueued.elapsed().as_secs_f64();
        s.metrics.stage_duration.with_label_values(&[&job.circuit, Stage::GpuQueue.name()]).observe(waited);
        s.metrics.partition_wait.with_label_values(&[priority.name(), WaitQueue::Gpu.name()]).observe(waited);
        job.record(index, |t| t.gpu_queue = Some(waited));
        if job.is_cancelled() {
            continue; // dropping the item frees its buffers and memory
        }
        job.started_on(index, backend.name());
        let on_gpu = InStage::enter(s, Stage::ProveStart);
        let t = Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| backend.prove_start(&job.key, witness)));
        let secs = t.elapsed().as_secs_f64();
        thread_busy.inc_by(secs);
        // a/b/c are gone once prove_start returns (its backend may have
        // freed them, and dropped their guard, sooner).
        drop(on_gpu);
        s.metrics.stage_duration.with_label_values(&[&job.circuit, Stage::ProveStart.name()]).observe(secs);
        job.record(index, |t| t.prove_start = Some(secs));
        transition(s, job.id, index, "abc freed");
        let pending = match result {
            Ok(Ok(p)) => {
                if let Some(d) = p.device_seconds {
                    s.metrics.gpu_busy_seconds.with_label_values(&[backend.name()]).inc_by(d);
                    job.record(index, |t| t.gpu_device = Some(d));
                }
                p
            }
            Ok(Err(e)) if e.is_bad_input() => {
                ticket.fail_after((held, attempt), e.reason(), e.to_string());
                continue;
            }
            Ok(Err(ProveError::NoRoomForProducts)) => {
                drop(held);
                let need = s.admission(&job.key, job.abc_from, ProductsPlacement::Cpu).total();
                let room = s.budget.total() - s.budget.resident();
                if need > room {
                    let why = format!(
                        "the device has no room for the circuit's matrices, and a, b, c computed on the host need \
                         {need} bytes a partition, more than the {room} bytes of memory budget the keys leave: \
                         raise pipeline.memory_budget or free device memory (gpu.bases = \"plain\")"
                    );
                    ticket.fail_after(attempt, FailureReason::Backend, why);
                    continue;
                }
                tracing::info!(job = %job.id, partition = index, device = device.name(),
                    "no room on the device for the circuit's matrices: the partition is synthesized again, with a, b, c on the host");
                send_round_again(s, ticket, Attempt { products: Some(ProductsPlacement::Cpu), ..attempt });
                continue;
            }
            Ok(Err(e)) if e.is_device_too_small() => {
                drop(held);
                too_small(s, &device, e.to_string(), attempt, ticket);
                continue;
            }
            Ok(Err(e)) => {
                drop(held);
                device_fault(s, &device, FailureReason::Backend, e.to_string(), attempt, ticket);
                continue;
            }
            Err(_) => {
                drop(held);
                let what = format!("prove_start on {} panicked", backend.name());
                device_fault(s, &device, FailureReason::Panic, what, attempt, ticket);
                continue;
            }
        };
        let pending_guard = s.ledger.guard(BufferClass::Pending, 0, None);
        let stage = InStage::enter(s, Stage::ProveFinish);
        let item = ToFinish { device: device.clone(), ticket, pending, held, pending_guard, stage, attempt };
        // Blocks while every finalize thread is busy and its queue is full
        // (never for critical work).
        if s.finalize_queue.send(priority, item).is_err() {
            return;
        }
    }
}

/// A device faulted on a partition: counts it against the device, then sends
/// the partition round again (synthesized anew, for whichever device is free)
/// while tries and a device in service remain; otherwise it fails.
fn device_fault(
    s: &Shared,
    device: &Device,
    reason: FailureReason,
    what: String,
    attempt: Attempt,
    ticket: Ticket,
) {
    device.fault(&what, s.config.device_fault_limit);
    let (job, index) = (ticket.job.clone(), ticket.index);
    job.note_fault(index, format!("try {} on {}: {what}", attempt.number, device.name()));
    if job.is_cancelled() {
        return; // the ticket, dropped, ends the partition as cancelled
    }
    let none_left = devices::none_in_service(&s.devices);
    if attempt.number >= s.config.max_attempts || none_left.is_some() {
        let why = none_left.map_or(String::new(), |n| format!("; {n}"));
        let what = format!("{what} (try {} of {}{why})", attempt.number, s.config.max_attempts);
        return ticket.fail_after(attempt, reason, what);
    }
    send_round_again(s, ticket, Attempt { number: attempt.number + 1, ..attempt });
}

/// A device too small for a partition: not a fault of the device (it stays
/// in service for the circuits it can prove). The partition goes round again
/// for a larger device where there is another, while tries remain;
/// otherwise it fails at once with the reason.
fn too_small(s: &Shared, device: &Device, what: String, attempt: Attempt, ticket: Ticket) {
    let (job, index) = (ticket.job.clone(), ticket.index);
    job.note_fault(index, format!("try {} on {}: {what}", attempt.number, device.name()));
    if job.is_cancelled() {
        return;
    }
    if s.devices.len() == 1 || attempt.number >= s.config.max_attempts {
        return ticket.fail_after(attempt, FailureReason::Backend, what);
    }
    send_round_again(s, ticket, Attempt { number: attempt.number + 1, ..attempt });
}

/// Queues a partition again, to be synthesized anew as `attempt` says, ahead
/// of the partitions not yet tried: its job has waited once already.
fn send_round_again(s: &Shared, ticket: Ticket, attempt: Attempt) {
    s.metrics.partition_retries.inc();
    ticket.job.set_stage(ticket.index, Stage::Queued);
    let mut q = s.lock_queue();
    q.push_front(ticket.job.priority, Queued { attempt, ticket }, Instant::now());
    s.note_queued(&q);
    drop(q);
    s.queued.notify_all();
}

/// Runs prove_finish for the partitions `takes` serves, most urgent first;
/// one finalizer serves critical work only, so that it never waits for a
/// G2 MSM of other work to end.
fn finalizer(s: &Shared, takes: Takes) {
    loop {
        match s.finalize_queue.recv_timeout(takes, Duration::from_millis(200)) {
            Ok((priority, item, waited)) => {
                s.metrics
                    .partition_wait
                    .with_label_values(&[priority.name(), WaitQueue::Finalize.name()])
                    .observe(waited.as_secs_f64());
                finish_partition(s, item)
            }
            Err(RecvError::Timeout) if !s.shutdown.load(Ordering::Acquire) => continue,
            Err(_) => return,
        }
    }
}

fn finish_partition(s: &Shared, item: ToFinish) {
    let ToFinish { device, ticket, pending, held, pending_guard, stage, attempt } = item;
    let backend = device.backend.clone();
    let (job, index) = (ticket.job.clone(), ticket.index);
    if job.is_cancelled() {
        return;
    }
    job.set_stage(index, Stage::ProveFinish);
    let public = pending.assignment.public_inputs().to_vec();
    let t = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        backend.prove_finish(&job.key, pending, Blinding::random(&mut rand::rngs::OsRng))
    }));
    let secs = t.elapsed().as_secs_f64();
    s.metrics.stage_duration.with_label_values(&[&job.circuit, Stage::ProveFinish.name()]).observe(secs);
    job.record(index, |t| t.prove_finish = Some(secs));
    // Where the witness went unchecked, its memory stays reserved through
    // verification: a proof that fails has it made again to be checked.
    let unchecked = s.left_unchecked(&job, &attempt);
    let held = unchecked.then_some(held);
    drop((pending_guard, stage));
    transition(s, job.id, index, "dealloc");
    let proof = match result {
        Ok(Ok(finished)) => {
            if let Some(d) = finished.device_seconds {
                s.metrics.gpu_busy_seconds.with_label_values(&[backend.name()]).inc_by(d);
                job.record(index, |t| t.gpu_device = Some(t.gpu_device.unwrap_or(0.0) + d));
            }
            finished.proof
        }
        Ok(Err(e)) if e.is_bad_input() => {
            return ticket.fail_after((held, attempt), e.reason(), e.to_string())
        }
        Ok(Err(e)) => {
            drop(held);
            return device_fault(s, &device, FailureReason::Backend, e.to_string(), attempt, ticket);
        }
        Err(_) => {
            drop(held);
            let what = format!("prove_finish on {} panicked", backend.name());
            return device_fault(s, &device, FailureReason::Panic, what, attempt, ticket);
        }
    };
    // Never hand out a proof that does not verify: a faulty device fails its
    // partition loudly instead.
    if let Some(verifier) = &job.verifier {
        let t = Instant::now();
        let verdict = verifier.verify(&proof, &public);
        let secs = t.elapsed().as_secs_f64();
        s.metrics.verify_duration.observe(secs);
        job.record(index, |t| t.verify = Some(secs));
        if let Err(e) = verdict {
            s.metrics.proofs_invalid.with_label_values(&[backend.name()]).inc();
            tracing::error!(job = %job.id, partition = index, backend = backend.name(), "proof rejected: {e}");
            if job.witness_check == WitnessCheck::Unchecked {
                let what = format!(
                    "the proof from backend {} failed verification ({e}); it was not returned. Nothing checked \
                     the witness before proving, so it may not satisfy the circuit (serve the circuit with its \
                     r1cs to have witnesses checked)",
                    backend.name()
                );
                return ticket.fail_after((held, attempt), FailureReason::InvalidProof, what);
            }
            if unchecked {
                if let Some(bad) = witness_fault(&attempt) {
                    tracing::warn!(job = %job.id, partition = index, "the witness, checked afresh: {bad}");
                    return ticket.fail_after((held, attempt), bad.reason(), bad.to_string());
                }
            }
            drop(held);
            let what = format!(
                "the proof from backend {} failed verification ({e}); it was not returned",
                backend.name()
            );
            return device_fault(s, &device, FailureReason::InvalidProof, what, attempt, ticket);
        }
    }
    // The witness (held by the attempt's synthesis) is let go before the
    // job can read as succeeded: a client that sees it done sees its
    // memory released too.
    drop((held, attempt));
    device.succeeded();
    ticket.succeed(proof, public)
}

/// What is wrong with a partition's witness that went to its device
/// unchecked, if anything: made again and checked constraint by constraint
/// ([`Synthesized::check`]). `None` where it satisfies its circuit (the
/// device is at fault) or its synthesis fails for another reason than its
/// input this time.
fn witness_fault(attempt: &Attempt) -> Option<ProveError> {
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (attempt.synthesize)())).ok()?;
    match made.and_then(|w| w.check()) {
        Err(e) if e.is_bad_input() => Some(e),
        _ => None,
    }
}

/// A counting semaphore whose permits release on drop; `in_use` is the
/// gauge of permits held.
struct Semaphore {
    state: Mutex<(usize, bool)>,
    cv: Condvar,
    in_use: prometheus::IntGauge,
}

struct Permit(Arc<Semaphore>);

impl Semaphore {
    fn new(n: usize, capacity: &prometheus::IntGauge, in_use: prometheus::IntGauge) -> Self {
        capacity.set(n as i64);
        in_use.set(0);
        Self { state: Mutex::new((n, false)), cv: Condvar::new(), in_use }
    }

    /// Waits for a permit; `None` once closed.
    fn acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if st.1 {
                return None;
            }
            if st.0 > 0 {
                st.0 -= 1;
                self.in_use.inc();
                return Some(Permit(self.clone()));
            }
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        self.0.in_use.dec();
        self.0.cv.notify_one();
    }
}

#[cfg(test)]
mod tests;
