//! Engine tests on the CPU backend: gauges return to zero on every path, the
//! permit rule bounds a/b/c buffers, reservations never exceed the budget.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rand::SeedableRng;

use super::*;
use crate::backend::{Backend, CpuBackend, ProductsPlacement};
use crate::circuits::BenchCircuit;
use crate::groth16::{keygen, synthesize, HostAbc, HostProducts, PendingProof, Proof, ProveError};

const K: u32 = 8;

fn key() -> Arc<ProvingKey> {
    static KEY: OnceLock<Arc<ProvingKey>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        Arc::new(keygen::generate_test_key(BenchCircuit::new(K, 2, None), &mut rng).unwrap())
    })
    .clone()
}

fn partition(seed: u64) -> SynthesisFn {
    Arc::new(move || synthesize(BenchCircuit::new(K, 2, Some(seed))))
}

fn failing_partition() -> SynthesisFn {
    Arc::new(|| Err(ProveError::Unsatisfied { index: 3, name: "round 0/u1 boolean".into() }))
}

fn job(partitions: Vec<SynthesisFn>) -> JobSpec {
    JobSpec {
        circuit: format!("bench-{K}"),
        priority: Priority::Normal,
        door: Door::InProcess,
        key: key(),
        verifier: None,
        witness_check: WitnessCheck::BySynthesis,
        abc_from: AbcFrom::Synthesis,
        partitions,
    }
}

/// How long a test waits for a job to end: generous, for a loaded machine
/// (these partitions prove in milliseconds each).
const ENDED_WITHIN: Duration = Duration::from_secs(300);

/// Waits for job `id` to end; a job that has not ended within
/// [`ENDED_WITHIN`] fails the test naming where each partition stands,
/// rather than hanging it.
fn ended(e: &Engine, id: JobId) -> JobStatus {
    let st = e.wait(id, Some(ENDED_WITHIN)).expect("a job the engine accepted");
    let stages: Vec<_> = st.partitions.iter().map(|p| p.stage.name()).collect();
    assert!(
        st.outcome.is_some(),
        "job {id} had not ended after {ENDED_WITHIN:?}: its partitions in {stages:?}, {} bytes reserved, {} promised",
        e.budget().reserved(),
        e.budget().promised()
    );
    st
}

/// The CPU backend with a slow prove_start, standing in for a busy GPU.
struct SlowGpu(Duration);

impl Backend for SlowGpu {
    fn name(&self) -> &str {
        "slow"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        std::thread::sleep(self.0);
        CpuBackend.prove_start(key, w)
    }
}

fn engine(config: PipelineConfig, gpu_delay: Duration) -> Engine {
    Engine::start(config, vec![Arc::new(SlowGpu(gpu_delay))], Arc::new(Metrics::new())).unwrap()
}

/// Nothing of the engine's jobs is counted any more: read as soon as they
/// have ended, with no time to settle, since every path lets a partition's
/// guards go before its ticket ends it.
fn assert_all_released(e: &Engine) {
    assert_eq!(e.ledger().counts(), buffers::ClassCounts::default(), "buffer counts");
    assert_eq!(e.ledger().bytes(), buffers::ClassCounts::default(), "buffer bytes");
    assert_eq!(e.budget().reserved(), 0, "reserved bytes");
    let m = e.metrics();
    for c in BufferClass::ALL {
        assert_eq!(m.buffers_in_flight.with_label_values(&[c.name()]).get(), 0, "{} gauge", c.name());
        assert_eq!(m.buffer_bytes.with_label_values(&[c.name()]).get(), 0, "{} bytes gauge", c.name());
    }
    assert_eq!(m.memory_reserved_bytes.get(), 0);
    for stage in Stage::IN_PIPELINE {
        let left = m.partitions_in_stage.with_label_values(&[stage.name()]).get();
        assert_eq!(left, 0, "partitions in {}", stage.name());
    }
}

fn verify_all(status: &JobStatus) {
    for p in &status.partitions {
        let proof: &Proof = p.proof.as_ref().expect("a proof per partition");
        assert!(proof.verify(&key().vk, &p.public_inputs));
        assert!(
            p.times.synthesis.is_some() && p.times.prove_start.is_some() && p.times.prove_finish.is_some()
        );
    }
}

#[test]
fn gauges_return_to_zero_after_success_failure_and_cancellation() {
    let e = engine(PipelineConfig { synthesis_threads: 2, ..Default::default() }, Duration::ZERO);
    // success
    let ok = e.submit(job((0..3).map(partition).collect())).unwrap();
    let st = ended(&e, ok);
    assert_eq!(st.outcome, Some(Outcome::Succeeded));
    verify_all(&st);
    assert_all_released(&e);
    // failure: one bad partition fails the job, naming it
    let bad = e.submit(job(vec![partition(1), failing_partition(), partition(2)])).unwrap();
    let st = ended(&e, bad);
    assert_eq!(st.outcome, Some(Outcome::Failed));
    assert!(
        st.error.as_deref().unwrap().contains("partition 1: witness does not satisfy constraint #3"),
        "{:?}",
        st.error
    );
    assert_all_released(&e);
    // cancellation mid-job, with a slow GPU so partitions are in every stage
    let e = engine(
        PipelineConfig { synthesis_threads: 2, partition_permits: 2, ..Default::default() },
        Duration::from_millis(100),
    );
    let long = e.submit(job((0..12).map(partition).collect())).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert!(e.cancel(long));
    let st = e.wait(long, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Cancelled));
    assert!(st.partitions.iter().any(|p| p.stage == Stage::Cancelled));
    assert_all_released(&e);
    let m = e.metrics();
    assert_eq!(m.jobs.with_label_values(&[&format!("bench-{K}"), "cancelled"]).get(), 1);
    assert!(!e.cancel(JobId::new()), "unknown job");
}

/// Every end the engine reports, in order.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl JobObserver for Recorder {
    fn partition_ended(&self, job: JobId, index: usize, end: &EndedPartition) {
        let proof = if end.proof.is_some() { "proof" } else { "no proof" };
        self.0.lock().unwrap().push(format!("{job} {index} {} {proof}", end.stage.name()));
    }
    fn job_ended(&self, job: JobId, outcome: Outcome, _error: Option<&str>) {
        self.0.lock().unwrap().push(format!("{job} {}", outcome.name()));
    }
}

/// An engine on the CPU whose ends a [`Recorder`] hears.
fn observed() -> (Engine, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend)];
    let observer = recorder.clone() as Arc<dyn JobObserver>;
    let e =
        Engine::start_observed(PipelineConfig::default(), backends, Arc::new(Metrics::new()), Some(observer))
            .unwrap();
    (e, recorder)
}

#[test]
fn the_observer_hears_every_end_before_a_waiter_does() {
    let (e, recorder) = observed();
    let ok = e.submit(job((0..3).map(partition).collect())).unwrap();
    ended(&e, ok);
    let seen = recorder.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[3], format!("{ok} succeeded"), "the job's end comes last");
    for i in 0..3 {
        assert!(seen.contains(&format!("{ok} {i} done proof")), "{seen:?}");
    }
    let bad = e.submit(job(vec![failing_partition()])).unwrap();
    ended(&e, bad);
    let seen = recorder.0.lock().unwrap().clone();
    assert_eq!(seen[4..], [format!("{bad} 0 failed no proof"), format!("{bad} failed")]);
}

#[test]
fn a_job_run_again_keeps_its_id_and_proves_only_what_had_no_proof() {
    let (e, recorder) = observed();
    let first = e.submit(job(vec![partition(7), partition(8)])).unwrap();
    let before = ended(&e, first);
    let kept = ProvedPartition {
        index: 0,
        proof: before.partitions[0].proof.unwrap(),
        public_inputs: before.partitions[0].public_inputs.clone(),
    };
    let id = JobId::new();
    // Partition 0 would fail if it ran: it must not.
    e.submit_as(id, job(vec![failing_partition(), partition(8)]), vec![kept.clone()]).unwrap();
    let after = ended(&e, id);
    assert_eq!((after.id, after.outcome), (id, Some(Outcome::Succeeded)), "{:?}", after.error);
    assert_eq!(after.partitions[0].proof, Some(kept.proof));
    for p in &after.partitions {
        assert!(p.proof.unwrap().verify(&key().vk, &p.public_inputs));
    }
    assert!(after.partitions[0].times.synthesis.is_none(), "the kept partition did not run");
    let ends: Vec<String> =
        recorder.0.lock().unwrap().iter().filter(|l| l.starts_with(&id.to_string())).cloned().collect();
    assert_eq!(ends, [format!("{id} 1 done proof"), format!("{id} succeeded")], "only what ran is reported");
    // Ended jobs are forgotten by age, and say which.
    assert!(e.forget_ended(Duration::from_secs(3600)).is_empty());
    let mut forgotten = e.forget_ended(Duration::ZERO);
    forgotten.sort();
    let mut both = vec![first, id];
    both.sort();
    assert_eq!(forgotten, both);
    assert!(e.status(first).is_none());
}

/// `p` permits, a GPU queue of `q` and six synthesis threads: with a slow
/// GPU, partitions pile up in front of it.
fn piling_up(p: usize, q: usize) -> PipelineConfig {
    PipelineConfig { partition_permits: p, gpu_queue_capacity: q, synthesis_threads: 6, ..Default::default() }
}

#[test]
fn permits_bound_the_partitions_holding_abc() {
    // P permits, queue capacity Q, one GPU worker, and a GPU much slower than
    // synthesis: partitions pile up in front of it. With the permit held until
    // the queue accepts a partition, a/b/c exist for at most P (synthesizing or
    // blocked on the queue) + Q (queued) + 1 (on the GPU). Releasing the permit
    // when synthesis returns instead lets every synthesis thread finish and
    // stack its buffers behind the full queue: with 6 threads the count
    // reaches Q + 1 + 6 and this assertion fails.
    let (p, q) = (2, 1);
    let e = engine(piling_up(p, q), Duration::from_millis(60));
    let id = e.submit(job((0..14).map(partition).collect())).unwrap();
    let st = ended(&e, id);
    assert_eq!(st.outcome, Some(Outcome::Succeeded));
    let peak = e.ledger().peaks().abc as usize;
    assert!(peak <= p + q + 1, "a/b/c held by {peak} partitions at once; bound is {}", p + q + 1);
    assert!(peak >= p + q, "the test must actually fill the pipeline (peak {peak})");
    // Pending partitions are bounded by the finalize queue: running + queued +
    // one held by the GPU worker waiting to hand off.
    let f = e.config().finalize_threads;
    assert!(e.ledger().peaks().pending as usize <= 2 * f + 1, "pending peak {}", e.ledger().peaks().pending);
    assert_all_released(&e);
}

/// A slow GPU that takes two partitions at once, counting how many are in
/// its prove_start together.
struct TwoInFlight {
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl Backend for TwoInFlight {
    fn name(&self) -> &str {
        "two"
    }
    fn partitions_in_flight(&self) -> crate::backend::InFlight {
        crate::backend::InFlight::Two
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        std::thread::sleep(Duration::from_millis(60));
        self.inside.fetch_sub(1, SeqCst);
        CpuBackend.prove_start(key, w)
    }
}

#[test]
fn a_device_with_two_partitions_in_flight_gets_two_workers_within_the_abc_bound() {
    // As above, with a device that takes two partitions at once: two workers
    // take from the queue, so a/b/c exist for at most P + Q + 2 partitions.
    let (p, q) = (2, 1);
    let gpu = Arc::new(TwoInFlight { inside: Default::default(), most: Default::default() });
    let e = Engine::start(piling_up(p, q), vec![gpu.clone()], Arc::new(Metrics::new())).unwrap();
    let id = e.submit(job((0..14).map(partition).collect())).unwrap();
    let st = ended(&e, id);
    assert_eq!(st.outcome, Some(Outcome::Succeeded));
    assert_eq!(gpu.most.load(std::sync::atomic::Ordering::SeqCst), 2, "both workers proved at once");
    let peak = e.ledger().peaks().abc as usize;
    assert!(peak <= p + q + 2, "a/b/c held by {peak} partitions at once; bound is {}", p + q + 2);
    assert_all_released(&e);
}

/// The CPU backend, reporting `placement` for a, b and c still to compute
/// and counting the witnesses that reach it with them so; it computes them
/// as a device would (from the matrices, whatever the host memory held for
/// them), unless it is told it has no room for the matrices, and notes the
/// bytes reserved against the budget when each witness reaches it.
struct Products {
    placement: ProductsPlacement,
    /// Witnesses with a, b, c left to it still to refuse for want of room.
    no_room: std::sync::atomic::AtomicUsize,
    deferred: std::sync::atomic::AtomicUsize,
    evaluated: std::sync::atomic::AtomicUsize,
    metrics: Arc<Metrics>,
    reserved: Mutex<Vec<i64>>,
}

impl Products {
    fn new(placement: ProductsPlacement, no_room: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            placement,
            no_room: no_room.into(),
            deferred: Default::default(),
            evaluated: Default::default(),
            metrics,
            reserved: Mutex::default(),
        })
    }

    fn counts(&self) -> (usize, usize) {
        (self.deferred.load(Ordering::Relaxed), self.evaluated.load(Ordering::Relaxed))
    }
}

impl Backend for Products {
    fn name(&self) -> &str {
        "products"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        use crate::groth16::synthesis::Evaluations;
        self.reserved.lock().unwrap().push(self.metrics.memory_reserved_bytes.get());
        let Evaluations::Products(p) = &w.abc else {
            self.evaluated.fetch_add(1, Ordering::Relaxed);
            return CpuBackend.prove_start(key, w);
        };
        self.deferred.fetch_add(1, Ordering::Relaxed);
        if self.no_room.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            // the fallback of a device without room: the host, if it may
            return CpuBackend.prove_start(key, w);
        }
        let [a, b, c] = p.matrices.products(&w.input_assignment, &w.aux_assignment);
        if (0..a.len()).any(|i| a[i] * b[i] != c[i]) {
            return Err(p.unsatisfied());
        }
        CpuBackend.prove_start(key, Synthesized { abc: Evaluations::Host(HostAbc::checked(a, b, c)), ..w })
    }
    fn products(&self, _: &ProvingKey) -> ProductsPlacement {
        self.placement
    }
}

/// The CPU backend taking a and b alone from the host, as a GPU's does
/// (c made as a·b: [`HostProducts::Ab`]), counting the witnesses that
/// reach it so and the bytes reserved then.
struct AbOnly {
    ab: std::sync::atomic::AtomicUsize,
    metrics: Arc<Metrics>,
    reserved: Mutex<Vec<i64>>,
}

impl Backend for AbOnly {
    fn name(&self) -> &str {
        "ab"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        use crate::groth16::synthesis::Evaluations;
        self.reserved.lock().unwrap().push(self.metrics.memory_reserved_bytes.get());
        if matches!(w.abc, Evaluations::Host(HostAbc { c: None, .. })) {
            self.ab.fetch_add(1, Ordering::Relaxed);
        }
        CpuBackend.prove_start(key, w)
    }
    fn host_products(&self) -> HostProducts {
        HostProducts::Ab
    }
}

/// A backend that makes c as a·b itself gets a and b alone from the host,
/// which reserves two vectors for them, not three; a witness that breaks
/// its circuit then goes unchecked to the device, and its proof fails
/// verification: checked afresh, it fails its partition as the input's
/// fault, named as the recorder names it, never the device's.
#[test]
fn a_and_b_alone_from_the_host_reserve_two_vectors_and_a_bad_witness_stays_the_inputs_fault() {
    let fp = Footprint::of(&key());
    let rest = fp.total() - fp.abc;
    let metrics = Arc::new(Metrics::new());
    let backend =
        Arc::new(AbOnly { ab: Default::default(), metrics: metrics.clone(), reserved: Mutex::default() });
    let config = PipelineConfig { device_fault_limit: 1, ..Default::default() };
    let e = Engine::start(config, vec![backend.clone()], metrics.clone()).unwrap();
    assert_eq!(e.admission_bytes(&key(), AbcFrom::Matrices), rest + fp.abc / 3 * 2, "two vectors of three");
    let verifier = Some(Arc::new(crate::groth16::Verifier::new(&key().vk)));
    let spec = |seeds: Vec<BenchCircuit>| JobSpec {
        abc_from: AbcFrom::Matrices,
        verifier: verifier.clone(),
        ..job(seeds.into_iter().map(assigned).collect())
    };
    let st = ended(&e, e.submit(spec((0..3).map(|s| BenchCircuit::new(K, 2, Some(s))).collect())).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_eq!(backend.ab.load(Ordering::Relaxed), 3, "each with c left as a·b");
    for held in backend.reserved.lock().unwrap().iter() {
        assert!(*held as u64 >= rest + fp.abc / 3 * 2, "{held} reserved");
    }

    let honest = synthesize(BenchCircuit::new(K, 2, Some(1))).unwrap();
    let mut wrong = honest.public_inputs().to_vec();
    wrong[1] += blstrs::Scalar::from(1u64);
    for _ in 0..2 {
        let st = e.wait(
            e.submit(spec(vec![BenchCircuit::new(K, 2, Some(1)).claiming(wrong.clone())])).unwrap(),
            None,
        );
        let st = st.unwrap();
        assert_eq!(st.outcome, Some(Outcome::Failed));
        assert!(st.error.as_deref().unwrap().contains("'out1'"), "{:?}", st.error);
        assert!(st.partitions[0].faults.is_empty(), "no device fault, no retry");
    }
    assert_eq!(backend.ab.load(Ordering::Relaxed), 5, "the bad witnesses reached the device unchecked");
    assert_eq!(metrics.proofs_invalid.with_label_values(&["ab"]).get(), 2);
    assert!(e.none_in_service().is_none(), "the device stays in service");
    assert_all_released(&e);
}

/// Each partition of bench-K, assigned from the circuit's recorded matrices.
fn assigned(circuit: BenchCircuit) -> SynthesisFn {
    static MATRICES: OnceLock<Arc<crate::groth16::Matrices>> = OnceLock::new();
    let m = MATRICES
        .get_or_init(|| Arc::new(crate::groth16::Matrices::record(BenchCircuit::new(K, 2, None)).unwrap()))
        .clone();
    Arc::new(move || m.assign(circuit.clone()))
}

/// Partitions whose a, b and c are products of recorded matrices reach a
/// backend that computes them on its device as they are (no a/b/c bytes on
/// the host), and are computed in synthesis for any other; both prove, a
/// bad witness fails its partition naming the constraint either way, and
/// every gauge returns to zero.
#[test]
fn products_go_to_the_device_that_computes_them_and_are_computed_in_synthesis_otherwise() {
    let honest = synthesize(BenchCircuit::new(K, 2, Some(1))).unwrap();
    let mut wrong = honest.public_inputs().to_vec();
    wrong[1] += blstrs::Scalar::from(1u64);
    for placement in [ProductsPlacement::Gpu, ProductsPlacement::Cpu] {
        let metrics = Arc::new(Metrics::new());
        let backend = Products::new(placement, 0, metrics.clone());
        let e = Engine::start(PipelineConfig::default(), vec![backend.clone()], metrics).unwrap();
        let parts = (0..4).map(|seed| assigned(BenchCircuit::new(K, 2, Some(seed)))).collect();
        let st = ended(&e, e.submit(job(parts)).unwrap());
        assert_eq!(st.outcome, Some(Outcome::Succeeded), "{placement:?}: {:?}", st.error);
        verify_all(&st);
        match placement {
            ProductsPlacement::Gpu => assert_eq!(backend.counts(), (4, 0)),
            ProductsPlacement::Cpu => assert_eq!(backend.counts(), (0, 4)),
        }
        let bad =
            e.submit(job(vec![assigned(BenchCircuit::new(K, 2, Some(1)).claiming(wrong.clone()))])).unwrap();
        let st = ended(&e, bad);
        assert_eq!(st.outcome, Some(Outcome::Failed));
        assert!(st.error.as_deref().unwrap().contains("'out1'"), "{placement:?}: {:?}", st.error);
        assert_all_released(&e);
    }
}

/// A partition whose a, b and c are left to the device holds no
/// reservation for their host bytes once synthesized; when the device then
/// has no room for the matrices, the host does not compute them unreserved:
/// the partition is synthesized again with a, b, c on the host (and their
/// bytes reserved), proves, and no fault is counted against the device.
#[test]
fn products_left_to_a_device_without_room_are_made_again_on_the_host_never_unreserved() {
    let metrics = Arc::new(Metrics::new());
    let backend = Products::new(ProductsPlacement::Gpu, 1, metrics.clone());
    let e = Engine::start(PipelineConfig::default(), vec![backend.clone()], metrics.clone()).unwrap();
    let st = ended(&e, e.submit(job(vec![assigned(BenchCircuit::new(K, 2, Some(7)))])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_eq!(backend.counts(), (1, 1), "left to the device once, then on the host");
    assert_eq!(metrics.partition_retries.get(), 1);
    assert!(st.partitions[0].faults.is_empty(), "{:?}", st.partitions[0].faults);
    assert_eq!(metrics.device_faults.with_label_values(&["products"]).get(), 0);
    // The one partition in flight each time: what it held on reaching the
    // device differs by exactly a, b and c's host bytes.
    let reserved = backend.reserved.lock().unwrap().clone();
    assert_eq!(reserved.len(), 2);
    assert_eq!(reserved[1] - reserved[0], Footprint::of(&key()).abc as i64, "{reserved:?}");
    assert_all_released(&e);
}

/// A partition whose kind leaves a, b and c to the matrices, on devices
/// that compute them, reserves no host bytes for them at all: a budget that
/// holds all but a, b and c proves such jobs (never reserving more) and
/// refuses one whose synthesis evaluates them. Should the device then have
/// no room for the matrices, the host cannot compute them inside that
/// budget: the partition fails saying so, rather than waiting for memory
/// that never comes.
#[test]
fn products_left_to_the_devices_reserve_no_host_bytes_for_a_b_and_c() {
    let fp = Footprint::of(&key());
    let without_abc = fp.total() - fp.abc;
    let config = || PipelineConfig { memory_budget: MemoryBudget::Bytes(without_abc), ..Default::default() };
    let matrices = |seeds: std::ops::Range<u64>| JobSpec {
        abc_from: AbcFrom::Matrices,
        ..job(seeds.map(|seed| assigned(BenchCircuit::new(K, 2, Some(seed)))).collect())
    };
    let metrics = Arc::new(Metrics::new());
    let backend = Products::new(ProductsPlacement::Gpu, 0, metrics.clone());
    let e = Engine::start(config(), vec![backend.clone()], metrics).unwrap();
    let st = ended(&e, e.submit(matrices(0..3)).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_eq!(backend.counts(), (3, 0), "a, b, c computed by the device each time");
    assert!(e.budget().peak() <= without_abc, "peak {} > {without_abc}", e.budget().peak());
    let evaluating = e.submit(job(vec![assigned(BenchCircuit::new(K, 2, Some(4)))])).unwrap_err();
    assert!(matches!(evaluating, SubmitError::NeverFits { .. }), "{evaluating}");
    assert_all_released(&e);

    let metrics = Arc::new(Metrics::new());
    let no_room = Products::new(ProductsPlacement::Gpu, 1, metrics.clone());
    let e = Engine::start(config(), vec![no_room], metrics).unwrap();
    let st = ended(&e, e.submit(matrices(7..8)).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Failed));
    let error = st.error.unwrap();
    assert!(
        error.contains("no room for the circuit's matrices") && error.contains("memory_budget"),
        "{error}"
    );
    assert_all_released(&e);
}

/// An engine whose a, b and c are computed on the host after the witness,
/// with a budget of two partitions' witnesses and one a, b and c (returned
/// last), four permits and four synthesis threads.
fn two_witnesses_and_one_abc() -> (Engine, Arc<Products>, Arc<Metrics>, u64) {
    let fp = Footprint::of(&key());
    let budget = 2 * (fp.total() - fp.abc) + fp.abc;
    let config = PipelineConfig {
        memory_budget: MemoryBudget::Bytes(budget),
        partition_permits: 4,
        synthesis_threads: 4,
        ..Default::default()
    };
    let metrics = Arc::new(Metrics::new());
    let backend = Products::new(ProductsPlacement::Cpu, 0, metrics.clone());
    let e = Engine::start(config, vec![backend.clone()], metrics.clone()).unwrap();
    (e, backend, metrics, budget)
}

/// Partitions whose a, b and c the host computes from the matrices after
/// their witness reserve them only then: a budget with room for one
/// partition's a, b and c beside two witnesses makes two witnesses at once
/// (reserving a, b and c at admission, it would make one), the a, b and c
/// are reserved by one partition at a time, every partition proves (none
/// waits forever for memory another took), and nothing stays promised.
#[test]
fn a_b_and_c_computed_on_the_host_are_reserved_after_the_witness() {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};
    let fp = Footprint::of(&key());
    let rest = fp.total() - fp.abc;
    let (e, backend, metrics, budget) = two_witnesses_and_one_abc();
    assert!(budget < 2 * fp.total(), "the test needs a, b and c larger than the rest");
    // The first two witnesses: the first waits (generously, for a loaded
    // machine) until the second is being made beside it. The second notes
    // the synth gauge then: two witnesses, their a, b and c not reserved yet.
    let (making, met) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let synth_seen = Arc::new(AtomicI64::new(0));
    let witness = |seed: u64| -> SynthesisFn {
        let (making, met, inner) =
            (making.clone(), met.clone(), assigned(BenchCircuit::new(K, 2, Some(seed))));
        let (metrics, synth_seen) = (metrics.clone(), synth_seen.clone());
        if seed >= 2 {
            return inner;
        }
        Arc::new(move || {
            if making.fetch_add(1, Ordering::AcqRel) > 0 {
                synth_seen.store(metrics.buffer_bytes.with_label_values(&["synth"]).get(), Ordering::Release);
                met.store(true, Ordering::Release);
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !met.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let w = inner();
            making.fetch_sub(1, Ordering::AcqRel);
            w
        })
    };
    let spec = JobSpec { abc_from: AbcFrom::Matrices, ..job((0..6).map(witness).collect()) };
    assert_eq!(e.admission_bytes(&key(), AbcFrom::Matrices), fp.total(), "a partition's whole footprint");
    let st = ended(&e, e.submit(spec).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_eq!(backend.counts(), (0, 6), "a, b and c computed on the host");
    assert!(met.load(Ordering::Acquire), "two witnesses were never made at once");
    let witnesses = 2 * (fp.aux + fp.density) as i64;
    assert_eq!(synth_seen.load(Ordering::Acquire), witnesses, "promised a, b and c are not in `synth` yet");
    assert!(e.budget().peak() <= budget, "peak {} > budget {budget}", e.budget().peak());
    // Each partition held its a, b and c when it reached the backend.
    for held in backend.reserved.lock().unwrap().iter() {
        assert!(*held as u64 >= rest + fp.abc, "{held} reserved");
    }
    let waited = metrics.partition_wait.with_label_values(&["normal", "products"]).get_sample_count();
    assert_eq!(waited, 6, "each partition's wait for a, b and c's memory is observed");
    assert_eq!((e.budget().promised(), metrics.memory_promised_bytes.get()), (0, 0));
    assert_all_released(&e);
}

/// Partitions that wait for their a, b and c's memory never stall the one
/// computing its own: its products are computed in parallel on the
/// synthesis pool, whose threads, waiting inside that work, take up other
/// tasks of the pool, so a partition that waited for memory on one of them
/// would sit above the partition holding that memory, which could then never
/// finish. Many partitions through a budget of two witnesses and one a, b and
/// c: a job that stalled there fails this test. While partitions waited on
/// the pool's threads it stalled in 6 runs of 8.
#[test]
fn partitions_waiting_for_a_b_and_c_never_stall_the_one_computing_them() {
    let (e, backend, metrics, _) = two_witnesses_and_one_abc();
    const PARTITIONS: u64 = 64;
    let partitions = (0..PARTITIONS).map(|seed| assigned(BenchCircuit::new(K, 2, Some(seed)))).collect();
    let st = ended(&e, e.submit(JobSpec { abc_from: AbcFrom::Matrices, ..job(partitions) }).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_eq!(backend.counts(), (0, PARTITIONS as usize), "a, b and c computed on the host");
    let waited = metrics.partition_wait.with_label_values(&["normal", "products"]).get_sample_count();
    assert_eq!(waited, PARTITIONS, "every partition waited for its a, b and c's memory, however briefly");
    assert_all_released(&e);
}

/// A received witness's hold that takes a while to let go, as a large
/// buffer's unmapping does: a job seen ended before it went would be seen
/// with the witness still counted.
struct SlowToRelease(Option<memory::HeldWitness>);

impl Drop for SlowToRelease {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
        drop(self.0.take());
    }
}

/// Refuses every witness at prove_start, as a device checking it would.
struct RefusesWitnesses;

impl Backend for RefusesWitnesses {
    fn name(&self) -> &str {
        "refuses"
    }
    fn prove_start(&self, _: &ProvingKey, _: Synthesized) -> Result<PendingProof, ProveError> {
        Err(ProveError::Unsatisfied { index: 0, name: "refused".into() })
    }
}

/// A partition that fails lets go of what it holds (its received witness,
/// its memory, its permit) before its job can read as failed, as one that
/// succeeds does: whether its synthesis or its device refused the witness.
#[test]
fn a_failed_partition_lets_its_witness_go_before_its_job_reads_failed() {
    let backends: [(&str, Arc<dyn Backend>, bool); 2] = [
        ("synthesis", Arc::new(SlowGpu(Duration::ZERO)), true),
        ("prove_start", Arc::new(RefusesWitnesses), false),
    ];
    for (refused_by, backend, in_synthesis) in backends {
        let metrics = Arc::new(Metrics::new());
        let e = Engine::start(PipelineConfig::default(), vec![backend], metrics.clone()).unwrap();
        let held = SlowToRelease(Some(e.hold_witness(1 << 20, &key()).unwrap()));
        let make = if in_synthesis { failing_partition() } else { partition(1) };
        let received: SynthesisFn = Arc::new(move || {
            let _held = &held;
            make()
        });
        let st = ended(&e, e.submit(job(vec![received])).unwrap());
        assert_eq!(st.outcome, Some(Outcome::Failed), "refused by {refused_by}");
        let now =
            (metrics.witness_bytes.get(), e.budget().reserved(), metrics.partition_permits_in_use.get());
        assert_eq!(now, (0, 0, 0), "witness bytes, bytes reserved and permits held when the job read failed (refused by {refused_by})");
    }
}

/// Frees a, b and c's accounting at once (as a GPU backend does once they
/// are copied), noting the bytes reserved and a, b, c's gauge before and after.
struct FreesAbcEarly(Arc<Metrics>, Mutex<Vec<(i64, i64)>>);

impl Backend for FreesAbcEarly {
    fn name(&self) -> &str {
        "frees-abc-early"
    }
    fn prove_start(&self, key: &ProvingKey, mut w: Synthesized) -> Result<PendingProof, ProveError> {
        let m = &self.0;
        let abc_bytes = || m.buffer_bytes.with_label_values(&["abc"]).get();
        let before = (m.memory_reserved_bytes.get(), abc_bytes());
        drop(std::mem::take(&mut w.abc_hold));
        let after = (m.memory_reserved_bytes.get(), abc_bytes());
        self.1.lock().unwrap().extend([before, after]);
        CpuBackend.prove_start(key, w)
    }
}

/// a, b and c's reservation and gauge ride in the witness to the backend,
/// which gives them back when it frees them, not when its prove_start ends.
#[test]
fn a_backend_gives_a_b_and_c_back_when_it_frees_them() {
    let metrics = Arc::new(Metrics::new());
    let backend = Arc::new(FreesAbcEarly(metrics.clone(), Mutex::default()));
    let e = Engine::start(PipelineConfig::default(), vec![backend.clone()], metrics).unwrap();
    let st = ended(&e, e.submit(job(vec![partition(1)])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    let seen = backend.1.lock().unwrap().clone();
    let fp = e.footprint(&key());
    let [(reserved, abc), (reserved_after, abc_after)] = seen[..] else { panic!("{seen:?}") };
    assert_eq!((reserved - reserved_after, abc_after), (fp.abc as i64, 0), "{seen:?}");
    assert!(abc > 0, "{seen:?}");
    assert_all_released(&e);
}

/// A partition in synthesis counts in the `synth` gauge at the witness it
/// will hold (its vectors grow where no buffer sees them), and not after.
#[test]
fn a_partition_in_synthesis_counts_its_witness_in_the_synth_gauge() {
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let held: SynthesisFn = Arc::new(move || {
        wait.lock().unwrap().recv().ok();
        synthesize(BenchCircuit::new(K, 2, Some(1)))
    });
    let metrics = Arc::new(Metrics::new());
    let e =
        Engine::start(PipelineConfig::default(), vec![Arc::new(SlowGpu(Duration::ZERO))], metrics.clone())
            .unwrap();
    let id = e.submit(job(vec![held])).unwrap();
    let fp = e.footprint(&key());
    let want = (fp.aux + fp.density + fp.abc) as i64;
    let synth = || metrics.buffer_bytes.with_label_values(&["synth"]).get();
    // Generous: admission and the synthesis pool starting on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while synth() != want {
        assert!(std::time::Instant::now() < deadline, "the synth gauge stayed at {}, not {want}", synth());
        std::thread::sleep(Duration::from_millis(10));
    }
    go.send(()).unwrap();
    let st = ended(&e, id);
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    assert_eq!(synth(), 0);
    assert_all_released(&e);
}

/// A stand-in for a GPU whose MSMs all run on the device: no host working
/// memory beyond the witness.
struct AllOnDevice;

impl Backend for AllOnDevice {
    fn name(&self) -> &str {
        "all-on-device"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        CpuBackend.prove_start(key, w)
    }
    fn host_working_bytes(&self, _: &ProvingKey) -> u64 {
        0
    }
}

/// A partition reserves the host working memory of the device that needs
/// the most, not the CPU prover's where no device needs it: a budget one
/// byte short of the CPU's footprint proves on such a device, and is
/// refused where a CPU backend serves beside it.
#[test]
fn a_partition_reserves_the_working_memory_its_devices_need() {
    let cpu = Footprint::of(&key());
    assert!(cpu.working > 0);
    let config =
        || PipelineConfig { memory_budget: MemoryBudget::Bytes(cpu.total() - 1), ..Default::default() };
    let start = |backends: Vec<Arc<dyn Backend>>| {
        Engine::start(config(), backends, Arc::new(Metrics::new())).unwrap()
    };
    let on_device = start(vec![Arc::new(AllOnDevice)]);
    assert_eq!(on_device.footprint(&key()), Footprint { working: 0, ..cpu });
    let st = ended(&on_device, on_device.submit(job(vec![partition(1), partition(2)])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert!(on_device.budget().peak() < cpu.total());
    assert_all_released(&on_device);
    let mixed = start(vec![Arc::new(AllOnDevice), Arc::new(SlowGpu(Duration::ZERO))]);
    assert_eq!(mixed.footprint(&key()), cpu);
    let err = mixed.submit(job(vec![partition(1)])).unwrap_err();
    assert!(matches!(err, SubmitError::NeverFits { .. }), "{err}");
}

#[test]
fn reservations_never_exceed_the_budget_under_a_burst() {
    let fp = Footprint::of(&key()).total();
    let budget = fp * 5 / 2; // room for two partitions at a time
    let config = PipelineConfig {
        partition_permits: 8,
        synthesis_threads: 4,
        memory_budget: MemoryBudget::Bytes(budget),
        ..Default::default()
    };
    let e = engine(config, Duration::from_millis(5));
    let ids: Vec<_> =
        (0..5).map(|j| e.submit(job((0..3).map(|i| partition(10 * j + i)).collect())).unwrap()).collect();
    for id in ids {
        assert_eq!(ended(&e, id).outcome, Some(Outcome::Succeeded));
    }
    assert!(e.budget().peak() <= budget, "peak {} > budget {budget}", e.budget().peak());
    assert!(e.budget().peak() >= 2 * fp, "two partitions should have fit at once");
    assert_all_released(&e);
    // A job that can never fit is rejected up front, with the numbers.
    let small = engine(
        PipelineConfig { memory_budget: MemoryBudget::Bytes(fp / 2), ..Default::default() },
        Duration::ZERO,
    );
    let err = small.submit(job(vec![partition(1)])).unwrap_err();
    assert!(matches!(err, SubmitError::NeverFits { .. }), "{err}");
    assert!(err.to_string().contains("memory_budget"), "{err}");
    assert!(matches!(small.submit(job(vec![])), Err(SubmitError::Empty)));
}

#[test]
fn metrics_exposition_names_every_family() {
    let e = engine(PipelineConfig::default(), Duration::ZERO);
    let id = e.submit(job(vec![partition(3)])).unwrap();
    ended(&e, id);
    let text = e.metrics().render();
    for name in [
        "provd_buffers_in_flight{class=\"abc\"}",
        "provd_buffer_bytes{class=\"pending\"}",
        "provd_memory_reserved_bytes",
        "provd_memory_budget_bytes",
        "provd_gpu_queue_depth",
        "provd_gpu_queue_capacity",
        "provd_partitions_waiting",
        &format!("provd_stage_duration_seconds_bucket{{circuit=\"bench-{K}\",stage=\"prove_start\""),
        &format!("provd_job_duration_seconds_count{{circuit=\"bench-{K}\"}} 1"),
        &format!("provd_jobs_total{{circuit=\"bench-{K}\",outcome=\"succeeded\"}} 1"),
        &format!("provd_partitions_total{{circuit=\"bench-{K}\",outcome=\"succeeded\"}} 1"),
        "provd_prove_start_thread_seconds_total{device=\"slow\"}",
        "process_resident_memory_bytes",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
}

#[test]
fn exposition_passes_promtool() {
    let e = engine(PipelineConfig::default(), Duration::ZERO);
    let ok = e.submit(job(vec![partition(4)])).unwrap();
    ended(&e, ok);
    let bad = e.submit(job(vec![failing_partition()])).unwrap();
    ended(&e, bad);
    crate::telemetry::metrics::assert_promtool_accepts(&e.metrics().render());
}

#[test]
fn stage_names_are_their_json_names() {
    use Stage::*;
    for st in [Queued, Synthesis, GpuQueue, ProveStart, ProveFinish, Done, Failed, Cancelled] {
        assert_eq!(serde_json::to_value(st).unwrap(), st.name(), "{st:?}");
    }
}

/// The CPU backend with one G1 part corrupted, standing in for a faulty GPU.
struct CorruptGpu;

impl Backend for CorruptGpu {
    fn name(&self) -> &str {
        "corrupt"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        let mut p = CpuBackend.prove_start(key, w)?;
        p.g1.h += <blstrs::G1Projective as group::Group>::generator();
        Ok(p)
    }
}

#[test]
fn a_proof_that_fails_verification_fails_its_partition_and_is_never_returned() {
    let m = Arc::new(Metrics::new());
    let e = Engine::start(PipelineConfig::default(), vec![Arc::new(CorruptGpu)], m.clone()).unwrap();
    let verifier = Some(Arc::new(crate::groth16::Verifier::new(&key().vk)));
    let id = e.submit(JobSpec { verifier, ..job(vec![partition(1), partition(2)]) }).unwrap();
    let st = ended(&e, id);
    assert_eq!(st.outcome, Some(Outcome::Failed));
    let error = st.error.unwrap();
    assert!(error.contains("backend corrupt failed verification"), "{error}");
    assert!(st.partitions.iter().all(|p| p.proof.is_none()), "no proof is returned");
    assert!(m.proofs_invalid.with_label_values(&["corrupt"]).get() >= 1);
    assert_all_released(&e);
    // The same backend without the check hands out the bad proof: the check is what stops it.
    let e = Engine::start(PipelineConfig::default(), vec![Arc::new(CorruptGpu)], m.clone()).unwrap();
    let id = e.submit(job(vec![partition(3)])).unwrap();
    let st = ended(&e, id);
    let p = &st.partitions[0];
    assert!(!p.proof.unwrap().verify(&key().vk, &p.public_inputs));
    // An honest backend's proofs pass the check.
    let e = Engine::start(PipelineConfig::default(), vec![Arc::new(CpuBackend)], Arc::new(Metrics::new()))
        .unwrap();
    let verifier = Some(Arc::new(crate::groth16::Verifier::new(&key().vk)));
    let id = e.submit(JobSpec { verifier, ..job(vec![partition(4)]) }).unwrap();
    let st = ended(&e, id);
    assert_eq!(st.outcome, Some(Outcome::Succeeded));
    assert!(st.partitions[0].times.verify.is_some());
}

/// When nothing checked the witnesses, a failing proof may be the client's
/// doing: it fails its partition but never counts against the device, so
/// that bad witnesses cannot take devices out of service.
#[test]
fn failing_proofs_of_unchecked_witnesses_do_not_count_against_the_device() {
    let config = PipelineConfig { device_fault_limit: 1, ..Default::default() };
    let e = Engine::start(config, vec![Arc::new(CorruptGpu)], Arc::new(Metrics::new())).unwrap();
    let verifier = Some(Arc::new(crate::groth16::Verifier::new(&key().vk)));
    for seed in 1..=3 {
        let spec = JobSpec {
            verifier: verifier.clone(),
            witness_check: WitnessCheck::Unchecked,
            ..job(vec![partition(seed)])
        };
        let st = ended(&e, e.submit(spec).unwrap());
        assert_eq!(st.outcome, Some(Outcome::Failed));
        let error = st.error.unwrap();
        assert!(error.contains("Nothing checked the witness"), "{error}");
        assert!(st.partitions[0].faults.is_empty(), "no device fault, no retry");
    }
    assert!(e.none_in_service().is_none(), "the device stays in service");
    assert_all_released(&e);
}

/// A device too small for every partition (a 16 GiB card under a key's
/// working buffers), as the CUDA backend's residency refuses it.
struct TooSmallGpu;

impl Backend for TooSmallGpu {
    fn name(&self) -> &str {
        "cuda:9"
    }
    fn prove_start(&self, _: &ProvingKey, _: Synthesized) -> Result<PendingProof, ProveError> {
        let source =
            crate::groth16::BackendFault::DeviceTooSmall { device: "cuda:9".into(), need: 12, free: 10 };
        Err(ProveError::Backend { backend: "cuda", source })
    }
}

/// A device too small fails the partition at once where there is no other
/// device, with the reason, and never counts against the device: it stays
/// in service for the circuits it can prove.
#[test]
fn a_device_too_small_fails_its_partitions_without_leaving_service() {
    let config = PipelineConfig { device_fault_limit: 1, ..Default::default() };
    let e = Engine::start(config, vec![Arc::new(TooSmallGpu)], Arc::new(Metrics::new())).unwrap();
    for seed in 1..=2 {
        let st = ended(&e, e.submit(job(vec![partition(seed)])).unwrap());
        assert_eq!(st.outcome, Some(Outcome::Failed));
        let error = st.error.unwrap();
        assert!(error.contains("even with its key streamed"), "{error}");
        assert_eq!(st.partitions[0].faults.len(), 1, "one try: no other device");
    }
    assert!(e.none_in_service().is_none(), "the device stays in service");
    assert_all_released(&e);
}

/// A backend that panics in prove_start, standing in for a bug in a stage.
struct PanickyGpu;

impl Backend for PanickyGpu {
    fn name(&self) -> &str {
        "panicky"
    }
    fn prove_start(&self, _: &ProvingKey, _: Synthesized) -> Result<PendingProof, ProveError> {
        panic!("injected panic in prove_start")
    }
}

/// A panic in synthesis or in a backend's stage fails only its partition:
/// the engine keeps serving and every buffer is released.
#[test]
fn panics_in_stages_fail_only_their_partition() {
    let e = Engine::start(PipelineConfig::default(), vec![Arc::new(CpuBackend)], Arc::new(Metrics::new()))
        .unwrap();
    let panics: SynthesisFn = Arc::new(|| panic!("injected panic in synthesis"));
    let st = ended(&e, e.submit(job(vec![panics, partition(1)])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Failed));
    assert!(st.error.unwrap().contains("panicked"));
    let st = ended(&e, e.submit(job(vec![partition(2)])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "the engine still proves");
    assert_all_released(&e);

    let config = PipelineConfig { max_attempts: 1, ..Default::default() };
    let e = Engine::start(config, vec![Arc::new(PanickyGpu)], Arc::new(Metrics::new())).unwrap();
    let st = ended(&e, e.submit(job(vec![partition(3)])).unwrap());
    assert_eq!(st.outcome, Some(Outcome::Failed));
    assert!(st.error.unwrap().contains("panicked"));
    assert_all_released(&e);
}

#[test]
fn resident_keys_shrink_what_partitions_may_take() {
    let config = PipelineConfig {
        memory_budget: MemoryBudget::Bytes(Footprint::of(&key()).total() * 3),
        ..Default::default()
    };
    let e = engine(config, Duration::ZERO);
    let total = e.budget().total();
    let held = e.hold_key("big", total - Footprint::of(&key()).total() / 2).unwrap();
    assert!(matches!(e.submit(job(vec![partition(1)])), Err(SubmitError::NeverFits { .. })));
    assert!(e.hold_key("another", total).is_err(), "a key that does not fit is refused");
    drop(held);
    let id = e.submit(job(vec![partition(1)])).unwrap();
    assert_eq!(ended(&e, id).outcome, Some(Outcome::Succeeded));
    assert_all_released(&e);
}

/// The CPU backend standing in for device `name`; counts its partitions and,
/// after `good` of them, fails every prove_start as a broken GPU would.
struct StandIn {
    name: String,
    done: std::sync::atomic::AtomicUsize,
    good: usize,
}

impl StandIn {
    fn new(name: &str, good: usize) -> Arc<Self> {
        Arc::new(Self { name: name.into(), done: Default::default(), good })
    }
    fn done(&self) -> usize {
        self.done.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Backend for StandIn {
    fn name(&self) -> &str {
        &self.name
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        std::thread::sleep(Duration::from_millis(5)); // long enough that a free device takes the next one
        if self.done() >= self.good {
            return Err(ProveError::Backend {
                backend: "cuda",
                source: crate::groth16::BackendFault::Other(format!("{}: illegal address", self.name)),
            });
        }
        self.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CpuBackend.prove_start(key, w)
    }
}

fn engine_on(devices: &[Arc<StandIn>], config: PipelineConfig) -> Engine {
    let backends = devices.iter().map(|d| d.clone() as Arc<dyn Backend>).collect();
    Engine::start(config, backends, Arc::new(Metrics::new())).unwrap()
}

#[test]
fn partitions_spread_over_1_2_and_4_devices() {
    for n in [1usize, 2, 4] {
        let devices: Vec<_> = (0..n).map(|i| StandIn::new(&format!("cpu:{i}"), usize::MAX)).collect();
        let config = PipelineConfig { partition_permits: 2 * n, gpu_queue_capacity: n, ..Default::default() };
        let e = engine_on(&devices, config);
        let id = e.submit(job((0..6 * n as u64).map(partition).collect())).unwrap();
        assert_eq!(ended(&e, id).outcome, Some(Outcome::Succeeded), "{n} devices");
        let counts: Vec<usize> = devices.iter().map(|d| d.done()).collect();
        assert_eq!(counts.iter().sum::<usize>(), 6 * n, "{counts:?}");
        assert!(counts.iter().all(|c| *c > 0), "every device took work: {counts:?}");
        assert!(e.devices().iter().all(|d| d.in_service));
        assert_all_released(&e);
    }
}

#[test]
fn a_device_that_fails_mid_job_is_taken_out_and_the_job_finishes_on_the_rest() {
    for n in [2usize, 4] {
        let mut devices: Vec<_> = (0..n - 1).map(|i| StandIn::new(&format!("cpu:{i}"), usize::MAX)).collect();
        let broken = StandIn::new(&format!("cpu:{}", n - 1), 2); // fails after two partitions
        devices.push(broken.clone());
        let config = PipelineConfig { partition_permits: 2 * n, gpu_queue_capacity: n, ..Default::default() };
        let e = engine_on(&devices, config);
        let id = e.submit(job((0..8 * n as u64).map(partition).collect())).unwrap();
        let st = ended(&e, id);
        assert_eq!(st.outcome, Some(Outcome::Succeeded), "{n} devices: {:?}", st.error);
        for p in &st.partitions {
            assert!(p.proof.unwrap().verify(&key().vk, &p.public_inputs));
        }
        let faulted: Vec<_> = st.partitions.iter().filter(|p| !p.faults.is_empty()).collect();
        assert!(!faulted.is_empty() && faulted[0].faults[0].contains("illegal address"), "{faulted:?}");
        let status = e.devices();
        let out = status.iter().find(|d| d.name == broken.name).unwrap();
        assert!(!out.in_service, "{status:?}");
        assert!(out.reason.as_deref().unwrap().contains("3 faults in a row"), "{status:?}");
        assert!(status.iter().filter(|d| d.name != broken.name).all(|d| d.in_service));
        let m = e.metrics();
        assert_eq!(m.device_in_service.with_label_values(&[&broken.name]).get(), 0);
        // three in a row took it out; up to two more come first when its two
        // good partitions finish between faults and end the streak
        let faults = m.device_faults.with_label_values(&[&broken.name]).get();
        assert!((3..=5).contains(&faults), "{faults} faults");
        assert_eq!(m.partition_retries.get(), faults, "every faulted partition went round again");
        assert_eq!(broken.done(), 2);
        // it takes no more work: the next job runs on the others alone
        let id = e.submit(job((0..4).map(partition).collect())).unwrap();
        assert_eq!(ended(&e, id).outcome, Some(Outcome::Succeeded));
        assert_eq!(broken.done(), 2);
        assert_all_released(&e);
    }
}

#[test]
fn when_every_device_is_out_the_work_fails_instead_of_waiting() {
    let devices = [StandIn::new("cpu:0", 0), StandIn::new("cpu:1", 1)];
    let e = engine_on(&devices, PipelineConfig { device_fault_limit: 2, ..Default::default() });
    let id = e.submit(job((0..6).map(partition).collect())).unwrap();
    let st = e.wait(id, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Failed), "{st:?}");
    assert!(e.none_in_service().is_some());
    // later jobs fail too, with the reason, rather than hang
    let id = e.submit(job(vec![partition(9)])).unwrap();
    let st = e.wait(id, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Failed));
    assert!(st.error.unwrap().contains("every device is out of service"));
    assert_all_released(&e);
}

#[test]
fn an_engine_thread_that_panics_is_recorded_as_dead() {
    let dead = std::sync::Mutex::new(Vec::new());
    super::guarded(&dead, "finalize-0", || {});
    assert!(dead.lock().unwrap().is_empty(), "a thread that returns is not dead");
    let handle = std::thread::spawn(move || {
        super::guarded(&dead, "dispatch", || panic!("queue poisoned"));
        dead.into_inner().unwrap()
    });
    assert_eq!(
        handle.join().expect("the panic stays inside guarded"),
        vec!["dispatch (queue poisoned)".to_string()]
    );
}

/// A device whose prove_start waits for the test's word, one partition per
/// token (or, once the test drops its sender, at once).
struct Gated {
    go: Mutex<std::sync::mpsc::Receiver<()>>,
    started: std::sync::atomic::AtomicUsize,
}

impl Gated {
    fn new() -> (Arc<Self>, std::sync::mpsc::Sender<()>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (Arc::new(Self { go: Mutex::new(rx), started: Default::default() }), tx)
    }

    fn started(&self) -> usize {
        self.started.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Backend for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn prove_start(&self, key: &ProvingKey, w: Synthesized) -> Result<PendingProof, ProveError> {
        self.started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = self.go.lock().unwrap().recv();
        CpuBackend.prove_start(key, w)
    }
}

/// Waits for `cond`, failing after a minute (far more than any step here
/// takes on a loaded machine) with what it waited for.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn critical(partitions: Vec<SynthesisFn>) -> JobSpec {
    JobSpec { priority: Priority::Critical, ..job(partitions) }
}

/// Normal partitions past prove_start (proved, or being finished).
fn past_the_device(e: &Engine, id: JobId) -> usize {
    let st = e.status(id).unwrap();
    st.partitions.iter().filter(|p| matches!(p.stage, Stage::ProveFinish | Stage::Done)).count()
}

#[test]
fn a_critical_job_waits_only_for_the_partition_on_the_device() {
    let (gpu, go) = Gated::new();
    let config = PipelineConfig {
        partition_permits: 1,
        gpu_queue_capacity: 1,
        synthesis_threads: 2,
        finalize_threads: 1,
        ..Default::default()
    };
    let e = Engine::start(config, vec![gpu.clone()], Arc::new(Metrics::new())).unwrap();
    let normal = e.submit(job((0..6).map(partition).collect())).unwrap();
    // Saturated: one partition on the device, one in the GPU queue, one
    // synthesized and holding the only permit while it waits to get in.
    let m = e.metrics().clone();
    wait_until("a saturated pipeline", || {
        gpu.started() == 1 && m.gpu_queue_depth.get() == 1 && m.partition_permits_in_use.get() == 1
    });
    assert_eq!(m.partitions_queued.with_label_values(&["normal"]).get(), 3);
    let urgent = e.submit(critical(vec![partition(100)])).unwrap();
    // Its own lane: admitted and synthesized although the permit is held.
    wait_until("the critical partition in the GPU queue", || {
        e.status(urgent).unwrap().partitions[0].stage == Stage::GpuQueue
    });
    assert_eq!(m.gpu_queue_depth_by_priority.with_label_values(&["critical"]).get(), 1);
    go.send(()).unwrap(); // the partition on the device ends
    wait_until("the next partition on the device", || gpu.started() == 2);
    go.send(()).unwrap();
    let st = e.wait(urgent, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    assert_eq!(st.priority, Priority::Critical);
    assert_eq!(past_the_device(&e, normal), 1, "only the partition that was on the device went before it");
    let waits = m.partition_wait.with_label_values(&["critical", "gpu"]).get_sample_count();
    assert_eq!(waits, 1, "its wait in the GPU queue is observed by priority");
    drop(go); // the rest run ungated
    let st = e.wait(normal, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    verify_all(&st);
    assert_all_released(&e);
    assert_eq!(m.critical_permits_in_use.get(), 0);
}

#[test]
fn memory_kept_for_critical_work_admits_it_while_other_work_fills_the_rest() {
    let (gpu, go) = Gated::new();
    let probe = engine(PipelineConfig::default(), Duration::ZERO);
    let fp = probe.footprint(&key()).total();
    drop(probe);
    let config = PipelineConfig {
        partition_permits: 4,
        gpu_queue_capacity: 4,
        synthesis_threads: 2,
        memory_budget: MemoryBudget::Bytes(3 * fp + fp / 2),
        ..Default::default()
    };
    let e = Engine::start(config, vec![gpu.clone()], Arc::new(Metrics::new())).unwrap();
    e.keep_for_critical(fp);
    let normal = e.submit(job((0..6).map(partition).collect())).unwrap();
    wait_until("the device busy", || gpu.started() == 1);
    // Two normal partitions fit beside the headroom; a third never starts.
    wait_until("two normal partitions admitted", || e.queued_partitions() == 4);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(e.queued_partitions(), 4, "the headroom is not taken by normal work");
    assert!(e.budget().reserved() <= 2 * fp + fp / 2, "{} reserved", e.budget().reserved());
    let urgent = e.submit(critical(vec![partition(100)])).unwrap();
    wait_until("the critical partition synthesized", || {
        e.status(urgent).unwrap().partitions[0].stage == Stage::GpuQueue
    });
    go.send(()).unwrap();
    wait_until("the next partition on the device", || gpu.started() == 2);
    go.send(()).unwrap();
    let st = e.wait(urgent, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.outcome, Some(Outcome::Succeeded), "{:?}", st.error);
    assert_eq!(past_the_device(&e, normal), 1, "it overtook the normal partition in the GPU queue");
    assert!(e.budget().peak() <= e.budget().total());
    drop(go);
    assert_eq!(e.wait(normal, Some(Duration::from_secs(60))).unwrap().outcome, Some(Outcome::Succeeded));
    assert_all_released(&e);

    // Headroom that leaves no room for a normal partition: normal jobs are
    // refused, saying why, and critical ones are not.
    e.keep_for_critical(3 * fp);
    let err = e.check(&job(vec![partition(1)])).unwrap_err();
    assert!(matches!(err, SubmitError::NeverFitsBesideHeadroom { .. }), "{err}");
    assert!(err.to_string().contains("kept for critical work"), "{err}");
    e.check(&critical(vec![partition(1)])).expect("critical work may use the headroom");
}

#[test]
fn without_a_critical_lane_critical_work_still_goes_first() {
    let (gpu, go) = Gated::new();
    let config = PipelineConfig {
        partition_permits: 1,
        gpu_queue_capacity: 1,
        critical_permits: 0,
        synthesis_threads: 2,
        ..Default::default()
    };
    let e = Engine::start(config, vec![gpu.clone()], Arc::new(Metrics::new())).unwrap();
    let low = e.submit(JobSpec { priority: Priority::Low, ..job((0..4).map(partition).collect()) }).unwrap();
    let m = e.metrics().clone();
    wait_until("a saturated pipeline", || {
        gpu.started() == 1 && m.gpu_queue_depth.get() == 1 && m.partition_permits_in_use.get() == 1
    });
    let urgent = e.submit(critical(vec![partition(100)])).unwrap();
    // The shared permit frees after two partitions leave the device (the
    // one in the GPU queue moves up, the one holding the permit moves in);
    // the critical partition is admitted next, before the low ones queued.
    drop(go);
    assert_eq!(e.wait(urgent, Some(Duration::from_secs(60))).unwrap().outcome, Some(Outcome::Succeeded));
    assert!(past_the_device(&e, low) <= 3, "it went before the low partition queued behind the permit");
    assert_eq!(e.wait(low, Some(Duration::from_secs(60))).unwrap().outcome, Some(Outcome::Succeeded));
    assert_all_released(&e);
}
