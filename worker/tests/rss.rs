//! The memory estimate against reality: one partition of a mid-size circuit on
//! the CPU backend, its peak RSS growth sampled from /proc, within ±25% of the
//! footprint the engine reserves for it. Alone in its test binary so that no
//! other test's allocations share the process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use provd::backend::CpuBackend;
use provd::circuits::BenchCircuit;
use provd::groth16::{keygen, synthesize};
use provd::pipeline::{Engine, Footprint, JobSpec, Outcome, PipelineConfig};
use provd::telemetry::{rss_bytes, Metrics};
use rand::SeedableRng;

extern "C" {
    fn mallopt(param: i32, value: i32) -> i32;
    fn malloc_trim(pad: usize) -> i32;
}
const M_MMAP_THRESHOLD: i32 = -3;

#[test]
fn rss_growth_of_a_partition_matches_its_estimate() {
    // Large buffers straight from mmap, returned on free: otherwise glibc keeps
    // freed memory and RSS shows the allocator's history, not the job's.
    unsafe { mallopt(M_MMAP_THRESHOLD, 256 * 1024) };
    const K: u32 = 17;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let key = Arc::new(keygen::generate_test_key(BenchCircuit::new(K, 4, None), &mut rng).unwrap());
    let config = PipelineConfig {
        partition_permits: 1,
        synthesis_threads: 1,
        finalize_threads: 1,
        ..Default::default()
    };
    let engine = Engine::start(config, vec![Arc::new(CpuBackend)], Arc::new(Metrics::new())).unwrap();
    let run = |seed: u64| {
        let spec = JobSpec {
            circuit: format!("bench-{K}"),
            priority: provd::pipeline::Priority::Normal,
            door: provd::pipeline::Door::InProcess,
            key: key.clone(),
            verifier: None,
            witness_check: provd::groth16::WitnessCheck::BySynthesis,
            abc_from: provd::groth16::AbcFrom::Synthesis,
            partitions: vec![Arc::new(move || synthesize(BenchCircuit::new(K, 4, Some(seed))))],
        };
        let id = engine.submit(spec).unwrap();
        assert_eq!(engine.wait(id, None).unwrap().outcome, Some(Outcome::Succeeded));
    };
    assert!(rss_bytes() > 0, "VmRSS in /proc/self/status is readable");
    run(1); // warm-up: thread pools, blst's scratch, lazily built tables
    unsafe { malloc_trim(0) };
    std::thread::sleep(Duration::from_millis(50));
    let baseline = rss_bytes();
    let peak = Arc::new(AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                peak.fetch_max(rss_bytes(), Ordering::AcqRel);
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    run(2);
    done.store(true, Ordering::Release);
    sampler.join().unwrap();
    let growth = peak.load(Ordering::Acquire).saturating_sub(baseline) as f64;
    let estimate = Footprint::of(&key).total() as f64;
    let ratio = growth / estimate;
    eprintln!(
        "bench-{K}: RSS growth {:.1} MiB, estimate {:.1} MiB, ratio {ratio:.2}",
        growth / 1048576.0,
        estimate / 1048576.0
    );
    assert!((0.75..=1.25).contains(&ratio), "RSS growth / estimate = {ratio:.2}, outside ±25%");
}
