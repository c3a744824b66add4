//! The service's rooms on the CPU: idempotency, the journal written before
//! a job runs and every end observed in it, restart recovery; on a circuit
//! kind defined here, outside `circuits/` (the HTTP tests serve it too).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Refusal, RequestError, RequestKey, Service, SubmitOptions, Submitted, Witnesses};
use crate::backend::CpuBackend;
use crate::circuits::{CircuitKind, KeySource, WitnessError};
use crate::config::{Config, JobStoreKind, OnRestart};
use crate::groth16::tests::Square;
use crate::groth16::{keygen, synthesize, ProvingKey, SynthesisFn};
use crate::jobs::journal::{AcceptedJob, JobObserver, Journal, SqliteJournal, StoredWitness};
use crate::pipeline::{Door, EndedPartition, JobId, Outcome, Priority, Stage, SubmitError};

/// A kind that exists only in tests: witnesses are `{"x": N}`.
pub(crate) struct SquareKind {
    pub key: Arc<ProvingKey>,
    pub source: KeySource,
}

impl CircuitKind for SquareKind {
    fn kind(&self) -> &'static str {
        "square"
    }
    fn key(&self) -> &Arc<ProvingKey> {
        &self.key
    }
    fn key_source(&self) -> &KeySource {
        &self.source
    }
    fn constraints(&self) -> usize {
        2
    }
    fn partition(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        let x = witness["x"]
            .as_u64()
            .filter(|x| *x < 1 << 32)
            .ok_or_else(|| WitnessError(format!("partition {index}: expected {{\"x\": N}} with N < 2^32")))?;
        Ok(Arc::new(move || synthesize(Square(Some(x)))))
    }
}

pub(crate) fn square_key() -> Arc<ProvingKey> {
    static KEY: OnceLock<Arc<ProvingKey>> = OnceLock::new();
    KEY.get_or_init(|| Arc::new(keygen::generate_test_key(Square(None), &mut rand::rngs::OsRng).unwrap()))
        .clone()
}

/// `kind` served as "square" on the CPU under `config`.
pub(crate) fn serve(config: Config, kind: impl CircuitKind + 'static) -> Arc<Service> {
    Service::start_with(
        config,
        vec![("square".into(), Arc::new(kind))],
        vec![Arc::new(CpuBackend)],
        None,
        Vec::new(),
    )
    .unwrap()
}

/// The square kind, its key from a (named, not read) file.
pub(crate) fn square() -> SquareKind {
    SquareKind { key: square_key(), source: KeySource::File { path: "square.params".into() } }
}

/// A service of the square circuit with its journal at `journal` (none: no journal).
fn service(journal: Option<&Path>, on_restart: OnRestart) -> Arc<Service> {
    let mut config = Config::default();
    config.jobs.store = JobStoreKind::Sqlite;
    config.jobs.path = journal.map(Path::to_path_buf);
    config.jobs.on_restart = on_restart;
    serve(config, square())
}

fn witnesses(xs: &[u64]) -> Witnesses {
    Witnesses::Json(xs.iter().map(|x| json!({ "x": x })).collect())
}

fn succeeded(s: &Service, id: JobId) {
    let status = s.wait(id).expect("a job of this worker");
    assert_eq!(status.outcome, Some(Outcome::Succeeded), "{:?}", status.error);
}

#[test]
fn retries_under_one_key_make_one_job_and_another_request_under_it_is_refused() {
    let s = service(None, OnRestart::Rerun);
    let submit = |xs: &[u64]| s.submit_witnesses("square", witnesses(xs), SubmitOptions::keyed("k"));
    let answers: Vec<Submitted> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8).map(|_| scope.spawn(|| submit(&[3, 4]).unwrap())).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let id = answers[0].id();
    assert!(answers.iter().all(|a| a.id() == id), "{answers:?}");
    assert_eq!(answers.iter().filter(|a| matches!(a, Submitted::New(_))).count(), 1, "{answers:?}");
    succeeded(&s, id);
    assert_eq!(submit(&[3, 4]).unwrap(), Submitted::Existing(id), "a retry after the end");
    let other = submit(&[5]).unwrap_err();
    assert!(matches!(&other, RequestError::KeyReused { job, .. } if *job == id), "{other}");
    assert_eq!(other.refusal(), Refusal::Conflict);
    // Without a key, the same request is a new job.
    let again = s.submit_witnesses("square", witnesses(&[3, 4]), SubmitOptions::default()).unwrap();
    assert!(matches!(again, Submitted::New(j) if j != id));
}

/// cuzk.v1's `request_id` is a label: Curio gives every WindowPoSt
/// partition of a deadline the same one. The same request under it is the
/// same job (a retry re-attaches); another request is another job.
#[test]
fn a_label_names_one_job_per_distinct_request_and_refuses_none() {
    let s = service(None, OnRestart::Rerun);
    let label = SubmitOptions {
        door: Door::Grpc,
        key: Some(RequestKey::Label("wdpost-1000-0-[9 9 9 9 9 9 9 9]".into())),
        ..SubmitOptions::default()
    };
    let submit = |xs: &[u64]| s.submit_witnesses("square", witnesses(xs), label.clone()).unwrap();
    let partitions: Vec<Submitted> = [[3], [4], [5]].iter().map(|xs| submit(xs)).collect();
    assert!(partitions.iter().all(|p| matches!(p, Submitted::New(_))), "{partitions:?}");
    let ids: std::collections::HashSet<JobId> = partitions.iter().map(|p| p.id()).collect();
    assert_eq!(ids.len(), 3, "three partitions under one label, three jobs");
    for p in &partitions {
        succeeded(&s, p.id());
    }
    assert_eq!(submit(&[4]), Submitted::Existing(partitions[1].id()), "a retry re-attaches to its job");
    // The same name as an HTTP Idempotency-Key is another namespace, with its own contract.
    let keyed = SubmitOptions::keyed("wdpost-1000-0-[9 9 9 9 9 9 9 9]");
    let http = s.submit_witnesses("square", witnesses(&[4]), keyed.clone()).unwrap();
    assert!(matches!(http, Submitted::New(id) if !ids.contains(&id)), "{http:?}");
    let refused = s.submit_witnesses("square", witnesses(&[6]), keyed).unwrap_err();
    assert_eq!(refused.refusal(), Refusal::Conflict, "{refused}");
}

/// Each class has its own queue bound: normal work holding its queue full
/// refuses more normal work, never a critical (or high) job.
#[test]
fn a_queue_full_of_normal_work_still_takes_critical_and_high_work() {
    let gate = Arc::new(Gate::default());
    let mut config = Config::default();
    config.server.max_queued_partitions = 3;
    config.pipeline.partition_permits = 1;
    let s = serve(config, GatedKind { square: square(), gate: gate.clone() });
    let at = |priority| SubmitOptions { priority: Some(priority), ..SubmitOptions::default() };
    // One partition takes the only permit and waits at the gate; three wait behind it.
    let head = s.submit_witnesses("square", witnesses(&[2, 3, 4]), at(Priority::Normal)).unwrap().id();
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while s.queued_partitions() > 2 {
        assert!(std::time::Instant::now() < deadline, "the dispatcher never took the head's partition");
        std::thread::sleep(Duration::from_millis(5));
    }
    let third = s.submit_witnesses("square", witnesses(&[5]), at(Priority::Normal)).unwrap().id();
    let full = s.submit_witnesses("square", witnesses(&[6]), at(Priority::Normal)).unwrap_err();
    assert!(
        matches!(full, RequestError::QueueFull { priority: Priority::Normal, queued: 3, limit: 3 }),
        "{full}"
    );
    assert_eq!(full.refusal(), Refusal::Busy);
    let critical = s.submit_witnesses("square", witnesses(&[7]), at(Priority::Critical)).unwrap().id();
    let high = s.submit_witnesses("square", witnesses(&[8, 9]), at(Priority::High)).unwrap().id();
    assert_eq!(s.queued_of(Priority::Normal), 3, "normal work still holds its queue");
    gate.open();
    for id in [critical, high, head, third] {
        succeeded(&s, id);
    }
}

/// A retry is for getting a proof: once the key's job was cancelled (or
/// failed), the same request under the key runs again, as a new job that
/// takes the key over (journal included), marked with its door.
#[test]
fn a_retry_after_its_job_was_cancelled_runs_again_under_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = service(Some(&dir.path().join("jobs.sqlite3")), OnRestart::Rerun);
    let grpc = SubmitOptions { door: Door::Grpc, ..SubmitOptions::keyed("porep-1000-7") };
    let submit = || s.submit_witnesses("square", witnesses(&(0..40).collect::<Vec<_>>()), grpc.clone());
    let first = submit().unwrap().id();
    s.cancel(first).unwrap().expect("the job");
    // The key is given up only when the cancelled job has ended without its
    // proof; a retry before that is still the same job (its last partition
    // may yet prove), so wait for the end, however long a loaded machine takes.
    let ended = s.wait(first).expect("a job of this worker");
    assert_eq!(ended.outcome, Some(Outcome::Cancelled), "40 partitions outlast a cancel");
    let retry = submit().unwrap();
    assert!(matches!(retry, Submitted::New(id) if id != first), "{retry:?}");
    assert_eq!(submit().unwrap(), Submitted::Existing(retry.id()), "the key now names the retry");
    assert_eq!(s.job(retry.id()).unwrap().unwrap().door, Door::Grpc);
    s.drain(Duration::from_secs(60));
}

#[test]
fn requests_are_refused_by_what_is_wrong_with_them() {
    let s = service(None, OnRestart::Rerun);
    let refusal = |circuit: &str, w: Witnesses| {
        s.submit_witnesses(circuit, w, SubmitOptions::default()).unwrap_err().refusal()
    };
    assert_eq!(refusal("cube", witnesses(&[1])), Refusal::BadInput);
    assert_eq!(refusal("square", witnesses(&[])), Refusal::BadInput);
    assert_eq!(refusal("square", Witnesses::Json(vec![json!({"y": 1})])), Refusal::BadInput);
    let too_many: Vec<u64> = (0..=s.config.server.max_queued_partitions as u64).collect();
    assert_eq!(refusal("square", witnesses(&too_many)), Refusal::BadInput);
    s.drain(Duration::ZERO);
    let draining = s.submit_witnesses("square", witnesses(&[2]), SubmitOptions::default()).unwrap_err();
    assert!(matches!(draining, RequestError::Submit(SubmitError::ShuttingDown)), "{draining}");
    assert_eq!(draining.refusal(), Refusal::ShuttingDown);
}

#[test]
fn the_journal_has_every_end_and_a_restart_serves_them_with_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite3");
    let ok = {
        let s = service(Some(&path), OnRestart::Rerun);
        let ok = s.submit_witnesses("square", witnesses(&[3, 4]), SubmitOptions::keyed("ok")).unwrap().id();
        succeeded(&s, ok);
        ok
    };
    let (_, recovered) = SqliteJournal::open(&path).unwrap();
    assert!(recovered.unfinished.is_empty(), "{:?}", recovered.unfinished);
    let ended = recovered.ended.iter().find(|e| e.job.id == ok).expect("the ended job, journaled");
    assert_eq!(ended.job.outcome, Outcome::Succeeded);
    assert!(ended.job.partitions.iter().all(|p| p.proof.is_some()), "every partition's proof journaled");
    drop(recovered);

    let s = service(Some(&path), OnRestart::Rerun);
    let status = s.job(ok).unwrap().expect("served after the restart");
    assert_eq!(status.outcome, Some(Outcome::Succeeded));
    assert_eq!(
        s.submit_witnesses("square", witnesses(&[3, 4]), SubmitOptions::keyed("ok")).unwrap(),
        Submitted::Existing(ok),
        "the key still names its job"
    );
}

/// A job accepted before a restart, as the journal holds it.
fn journaled(path: &Path, xs: &[u64], key: Option<&str>) -> JobId {
    let (journal, _) = SqliteJournal::open(path).unwrap();
    let id = JobId::new();
    let job = AcceptedJob {
        id,
        circuit: "square".into(),
        priority: Priority::High,
        door: Door::Grpc,
        witnesses: xs.iter().map(|x| StoredWitness::Json(json!({ "x": x }))).collect(),
        idempotency: key.map(|k| (k.to_string(), [1; 32])),
    };
    journal.accepted(&job).unwrap();
    id
}

#[test]
fn a_restart_runs_unfinished_jobs_again_under_their_ids_or_fails_them_by_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite3");
    let rerun = journaled(&path, &[2, 5], Some("r"));
    let s = service(Some(&path), OnRestart::Rerun);
    succeeded(&s, rerun);
    let again = s.job(rerun).unwrap().unwrap();
    assert_eq!((again.priority, again.door), (Priority::High, Door::Grpc), "run again as it came");
    let same = crate::service::Idempotency { key: "r".into(), digest: [1; 32] };
    assert_eq!(
        s.jobs.submit("square", witnesses(&[2, 5]), Priority::Normal, Door::Grpc, Some(same)).unwrap(),
        Submitted::Existing(rerun)
    );
    s.drain(Duration::from_secs(60));
    drop(s);

    let failed = journaled(&path, &[7], None);
    let s = service(Some(&path), OnRestart::Fail);
    let status = s.job(failed).unwrap().expect("served, failed");
    assert_eq!((status.outcome, status.priority), (Some(Outcome::Failed), Priority::High));
    assert!(status.error.as_deref().unwrap_or("").contains("on_restart"), "{:?}", status.error);
    drop(s);
    let (_, recovered) = SqliteJournal::open(&path).unwrap();
    assert!(recovered.unfinished.is_empty(), "the failure is journaled: {:?}", recovered.unfinished);
}

#[test]
fn proofs_kept_across_a_restart_that_the_key_served_now_rejects_are_proved_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite3");
    let id = journaled(&path, &[3, 4], None);
    // Partition 0 was proved before the restart, under a key since replaced.
    let old_key = keygen::generate_test_key(Square(None), &mut rand::rngs::OsRng).unwrap();
    let (proof, public_inputs) = crate::backend::prove(&CpuBackend, &old_key, Square(Some(3))).unwrap();
    let (journal, _) = SqliteJournal::open(&path).unwrap();
    let ended = EndedPartition { stage: Stage::Done, proof: Some(proof), public_inputs, error: None };
    journal.partition_ended(id, 0, &ended);
    drop(journal);
    let s = service(Some(&path), OnRestart::Rerun);
    let status = s.wait(id).unwrap();
    assert_eq!(status.outcome, Some(Outcome::Succeeded), "{:?}", status.error);
    let vk = &square_key().vk;
    for (i, p) in status.partitions.iter().enumerate() {
        assert!(p.proof.unwrap().verify(vk, &p.public_inputs), "partition {i} under the key served");
    }
    assert_ne!(status.partitions[0].proof, Some(proof), "the stale proof was not kept");
}

#[test]
fn a_job_the_draining_engine_refuses_is_not_left_in_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite3");
    let s = service(Some(&path), OnRestart::Rerun);
    s.drain(Duration::ZERO);
    assert!(s.submit_witnesses("square", witnesses(&[2]), SubmitOptions::default()).is_err());
    drop(s);
    let (_, recovered) = SqliteJournal::open(&path).unwrap();
    assert!(recovered.unfinished.is_empty() && recovered.ended.is_empty());
}

#[test]
fn verifying_keys_are_offered_in_the_kinds_encodings() {
    let s = service(None, OnRestart::Rerun);
    let (encoding, bytes) = s.verifying_key("square", None).unwrap();
    assert!(!bytes.is_empty(), "{encoding:?}");
    assert!(matches!(s.verifying_key("cube", None), Err(super::VkError::UnknownCircuit(_))));
    assert!(matches!(s.verifying_key("square", Some("zz")), Err(super::VkError::Encoding(_))));
}

/// A gate that synthesis waits at until it is opened.
#[derive(Default)]
struct Gate(std::sync::Mutex<bool>, std::sync::Condvar);

impl Gate {
    fn wait(&self) {
        let mut open = self.0.lock().unwrap();
        while !*open {
            open = self.1.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }
}

/// The square kind, slow to decode (widening the time between a
/// submission's bound check and its queueing) and with synthesis held at a gate.
struct GatedKind {
    square: SquareKind,
    gate: Arc<Gate>,
}

impl CircuitKind for GatedKind {
    fn kind(&self) -> &'static str {
        "square"
    }
    fn key(&self) -> &Arc<ProvingKey> {
        self.square.key()
    }
    fn key_source(&self) -> &KeySource {
        self.square.key_source()
    }
    fn constraints(&self) -> usize {
        self.square.constraints()
    }
    fn partition(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        std::thread::sleep(Duration::from_millis(20));
        let inner = self.square.partition(index, witness)?;
        let gate = self.gate.clone();
        Ok(Arc::new(move || {
            gate.wait();
            inner()
        }))
    }
}

#[test]
fn concurrent_submissions_never_pass_the_queue_bound_together() {
    let gate = Arc::new(Gate::default());
    let mut config = Config::default();
    config.server.max_queued_partitions = 5;
    config.pipeline.partition_permits = 1;
    let s = serve(config, GatedKind { square: square(), gate: gate.clone() });
    // One partition holds the only permit at the gate; the other stays
    // queued (a partition is taken only with a permit), leaving room for four.
    let first = s.submit_witnesses("square", witnesses(&[2, 3]), SubmitOptions::default()).unwrap().id();
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while s.queued_partitions() > 1 {
        assert!(std::time::Instant::now() < deadline, "the dispatcher never took the first job's partition");
        std::thread::sleep(Duration::from_millis(5));
    }
    let answers: Vec<Result<Submitted, RequestError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| s.submit_witnesses("square", witnesses(&[4, 5]), SubmitOptions::default()))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let accepted: Vec<JobId> = answers.iter().filter_map(|a| a.as_ref().ok().map(|s| s.id())).collect();
    assert_eq!(accepted.len(), 2, "two jobs of two fill the four places left: {answers:?}");
    assert!(s.queued_partitions() <= 5, "{} queued", s.queued_partitions());
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused.refusal(), Refusal::Busy, "{refused}");
    }
    gate.open();
    for id in std::iter::once(first).chain(accepted) {
        succeeded(&s, id);
    }
}

#[test]
fn the_unready_summary_keeps_the_details_back() {
    let store = super::Unready::Store("job journal /var/lib/provd/jobs.sqlite3: disk I/O error".into());
    assert!(store.to_string().contains("/var/lib/provd"));
    assert!(!store.summary().contains('/'), "{}", store.summary());
    let dead = super::Unready::DeadThreads(vec!["dispatch (boom)".into()]);
    assert!(dead.to_string().contains("dispatch (boom)") && !dead.summary().contains("boom"));
}
