//! The CUDA backend against the CPU on a real device; each test says it
//! is skipped (and why) where no device can be opened.

use blstrs::Scalar;
use provd_kernels::{Order, PageLocked};

use super::copy_plan::{HostVectors, Vectors};
use super::device_key::h_order;
use super::h_chain::{quotient_on_device, Held};
use super::residency::{key_bytes, matrices_bytes};
use super::*;
use crate::backend::{prove, CpuBackend};
use crate::circuits::{BenchCircuit, Builtin, Shape};
use crate::groth16::synthesis::{Evaluations, HostAbc};
use crate::groth16::{domain::Domain, keygen, synthesize, Blinding};
use crate::groth16::{Matrices, Reduction};
use ff::Field;
use rand::SeedableRng;

/// H's scalars in natural order, as the CPU reference returns them; c
/// `None`: left as a·b, made in place of a or b's host copy once copied.
fn quotient(
    gpu: &CudaBackend,
    r: Reduction,
    log_n: u32,
    (a, b, c): (&[Scalar], &[Scalar], Option<&[Scalar]>),
    held: Held,
) -> Vec<Scalar> {
    let mut state = gpu.state.lock().unwrap();
    let abc = HostAbc { a: a.to_vec(), b: b.to_vec(), c: c.map(<[Scalar]>::to_vec) };
    let abc = Vectors::OnHost(HostVectors::pageable(abc));
    let lane = gpu.gpu.copy_lane().unwrap();
    let mut h =
        quotient_on_device(&gpu.gpu, &lane, &mut state.ntts, r, log_n, abc, &PageLocked::pageable(&[]), held)
            .unwrap()
            .h;
    if h_order(r) == Order::BitReversed {
        state.ntts[&r.root()].bit_reverse(&mut h).unwrap();
    }
    let mut h = h.download(&gpu.gpu).unwrap();
    h.truncate(r.h_len(1 << log_n));
    h
}

fn backend(options: CudaOptions) -> Option<CudaBackend> {
    match CudaBackend::open(0, &std::env::temp_dir().join("provd-test-data"), options) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_quotient_matches_cpu() {
    let Some(gpu) = backend(CudaOptions::default()) else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    for log_n in [1u32, 6, 12, 18, 22] {
        let n = 1usize << log_n;
        // short vectors: zero-padding must match too
        let len = n - n / 3;
        let v = |rng: &mut rand_chacha::ChaCha8Rng| {
            (0..len).map(|_| Scalar::random(&mut *rng)).collect::<Vec<_>>()
        };
        let (a, b, c) = (v(&mut rng), v(&mut rng), v(&mut rng));
        let ab: Vec<Scalar> = a.iter().zip(&b).map(|(a, b)| a * b).collect();
        for r in [Reduction::Bellperson, Reduction::Snarkjs] {
            let domain = Domain::on(log_n, r.root());
            let want = r.quotient(&domain, a.clone(), b.clone(), c.clone());
            // c left as a·b: the quotient of c = a·b given whole
            let want_ab = r.quotient(&domain, a.clone(), b.clone(), ab.clone());
            for held in [Held::Three, Held::Two] {
                let got = quotient(&gpu, r, log_n, (&a, &b, Some(&c)), held);
                assert_eq!(got, want, "{r:?}, {held:?}, n=2^{log_n}");
                let got = quotient(&gpu, r, log_n, (&a, &b, None), held);
                assert_eq!(got, want_ab, "{r:?}, {held:?}, n=2^{log_n}, c as a·b");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_prove_start_matches_cpu_and_proofs_verify() {
    let Some(gpu) = backend(CudaOptions::default()) else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for k in [4, 10, 14, 16] {
        let key = keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap();
        let w = synthesize(BenchCircuit::new(k, 4, Some(3))).unwrap();
        let ours = gpu.prove_start(&key, w.clone()).unwrap();
        let cpu = CpuBackend.prove_start(&key, w).unwrap();
        assert_eq!(ours.g1, cpu.g1, "bench-{k}: G1 parts");
        assert!(ours.device_seconds.is_some_and(|d| d > 0.0));
        // B's G2 MSM ran on the device, in prove_start, and agrees with blst's
        let on_host = crate::groth16::prover::b_g2(&key, &cpu.assignment);
        assert_eq!(ours.b_g2, Some(on_host), "bench-{k}: B in G2");
        let public = ours.assignment.public_inputs().to_vec();
        let blind = Blinding::random(&mut rng);
        let on_cpu = crate::groth16::prover::finish_on_cpu(&key, cpu, blind);
        let finished = gpu.prove_finish(&key, ours, blind).unwrap();
        assert_eq!(finished.proof, on_cpu, "bench-{k}: the CPU's proof for the same blinding");
        assert!(finished.proof.verify(&key.vk, &public), "bench-{k}");
    }
    // every key so far stayed resident: one upload each, no eviction
    let res = gpu.resident_keys();
    assert_eq!(res.keys.len(), 4);
    assert!(res.keys.iter().all(|k| k.uploads == 1 && k.device_bytes > 0), "{res:?}");
    assert_eq!(res.evictions, 0);
}

/// Two partitions in flight: two threads prove at once on one backend,
/// each copying its vectors before it locks the device (while the
/// other's kernels run); every proof equals the CPU's for its blinding.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_two_partitions_in_flight_prove_what_the_cpu_proves() {
    let options = CudaOptions { partitions_in_flight: InFlight::Two, ..CudaOptions::default() };
    let Some(gpu) = backend(options) else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let dense = Builtin { shape: Shape::Dense, log_size: 14 };
    let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let (gpu, key) = (&gpu, &key);
            scope.spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(thread);
                for round in 0..4 {
                    let w = synthesize(dense.circuit(Some(10 * thread + round))).unwrap();
                    let ours = gpu.prove_start(key, w.clone()).unwrap();
                    assert!(ours.steps.iter().any(|s| s.step.starts_with("copies (before")));
                    let cpu = CpuBackend.prove_start(key, w).unwrap();
                    assert_eq!(ours.g1, cpu.g1, "thread {thread} round {round}");
                    let public = ours.assignment.public_inputs().to_vec();
                    let blind = Blinding::random(&mut rng);
                    let on_cpu = crate::groth16::prover::finish_on_cpu(key, cpu, blind);
                    let finished = gpu.prove_finish(key, ours, blind).unwrap();
                    assert_eq!(finished.proof, on_cpu, "thread {thread} round {round}");
                    assert!(finished.proof.verify(&key.vk, &public));
                }
            });
        }
    });
}

/// a, b and c computed on the device from the circuit's matrices
/// (uploaded once, beside the key) prove what the CPU proves from the
/// same witness, with one and two partitions in flight, bit-heavy and
/// dense; a witness that breaks a constraint is refused with the
/// recorder's name for it; where the matrices do not fit (a key memory
/// limit that holds the key alone), a, b and c are computed on the host,
/// from then on in synthesis, and the proofs are the same.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_products_on_the_device_prove_what_the_cpu_proves() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let circuits =
        [Builtin { shape: Shape::Bits, log_size: 10 }, Builtin { shape: Shape::Dense, log_size: 12 }];
    let setup: Vec<_> = circuits
        .iter()
        .map(|b| {
            let matrices = Arc::new(Matrices::record(b.circuit(None)).unwrap());
            (*b, keygen::generate_test_key_for(&matrices, &mut rng).unwrap(), matrices)
        })
        .collect();
    for in_flight in [InFlight::One, InFlight::Two] {
        let Some(gpu) = backend(CudaOptions { partitions_in_flight: in_flight, ..CudaOptions::default() })
        else {
            return;
        };
        for (b, key, matrices) in &setup {
            assert_eq!(gpu.products(key), ProductsPlacement::Gpu);
            for seed in [1u64, 2] {
                let w = matrices.assign(b.circuit(Some(seed))).unwrap();
                assert!(matches!(w.abc, Evaluations::Products(_)));
                let steps = prove_both(&gpu, key, w, &mut rng);
                assert!(steps.contains(&"products"), "{b:?} {in_flight:?}: {steps:?}");
            }
        }
        // each key's bytes count its matrices: more than its bases alone
        let res = gpu.resident_keys();
        for (_, key, matrices) in &setup {
            let got = res.keys.iter().find(|k| k.fingerprint == key.fingerprint()).unwrap();
            assert!(got.device_bytes > matrices_bytes(matrices), "{res:?}");
        }
    }
    let Some(gpu) = backend(CudaOptions::default()) else { return };
    let (b, key, matrices) = &setup[0];
    let honest = matrices.assign(b.circuit(Some(3))).unwrap().evaluated().unwrap();
    let mut wrong = honest.public_inputs().to_vec();
    wrong[1] += Scalar::ONE;
    let w = matrices.assign(b.circuit(Some(3)).claiming(wrong)).unwrap();
    let err = gpu.prove_start(key, w).unwrap_err();
    assert!(err.to_string().contains("'out1'"), "named as the recorder names it: {err}");
    assert!(err.is_bad_input(), "{err:?}");

    // a limit that holds the plain bases and no more: the host computes a, b, c
    let plain =
        CudaOptions { bases: BasesLayout::Plain, products: ProductsPlacement::Cpu, ..CudaOptions::default() };
    let Some(gpu) = backend(plain.clone()) else { return };
    let (b, key, matrices) = &setup[0];
    prove_both(&gpu, key, matrices.assign(b.circuit(Some(4))).unwrap().evaluated().unwrap(), &mut rng);
    let limit = gpu.resident_keys().keys[0].device_bytes;
    let limited = CudaOptions { key_memory_limit: Some(limit), products: ProductsPlacement::Gpu, ..plain };
    let Some(gpu) = backend(limited.clone()) else { return };
    assert_eq!(gpu.products(key), ProductsPlacement::Gpu, "until the matrices are tried");
    let steps = prove_both(&gpu, key, matrices.assign(b.circuit(Some(5))).unwrap(), &mut rng);
    assert!(steps.iter().any(|s| s.starts_with("products on the host")), "{steps:?}");
    // from then on synthesis computes them, and the device proves as usual
    assert_eq!(gpu.products(key), ProductsPlacement::Cpu);
    let w =
        gpu.products(key).ready(matrices.assign(b.circuit(Some(6))).unwrap(), gpu.host_products()).unwrap();
    assert!(matches!(w.abc, Evaluations::Host(HostAbc { c: None, .. })), "a and b alone: c made as a·b");
    let steps = prove_both(&gpu, key, w, &mut rng);
    assert!(!steps.iter().any(|s| s.starts_with("products")), "{steps:?}");
    // a bad witness, left unchecked as a and b, gives a proof that fails
    // verification; checked afresh, it is named as the recorder names it
    let mut wrong = honest.public_inputs().to_vec();
    wrong[1] += Scalar::ONE;
    let bad = matrices.assign(b.circuit(Some(3)).claiming(wrong.clone())).unwrap();
    let w = gpu.products(key).ready(bad.clone(), HostProducts::Ab).unwrap();
    let pending = gpu.prove_start(key, w).unwrap();
    let proof = gpu.prove_finish(key, pending, Blinding::random(&mut rng)).unwrap().proof;
    assert!(!proof.verify(&key.vk, &wrong), "a witness that fails its circuit never gives a proof");
    let err = bad.check().unwrap_err();
    assert!(err.to_string().contains("'out1'"), "{err}");

    // a, b, c with no host memory held for them (the pipeline's, once
    // synthesis left them to the device) are refused, not computed on the
    // host, for the caller to make the witness again
    let Some(gpu) = backend(limited) else { return };
    let mut w = matrices.assign(b.circuit(Some(7))).unwrap();
    assert!(w.release_host_products());
    let err = gpu.prove_start(key, w).unwrap_err();
    assert!(matches!(err, ProveError::NoRoomForProducts), "{err:?}");
    assert!(!err.is_bad_input());
    assert_eq!(gpu.products(key), ProductsPlacement::Cpu);
}

/// The last proof on `gpu` took no more device memory than its room check
/// asked: a rule that asks less would let a small card run out inside a
/// kernel.
fn within_its_room(gpu: &CudaBackend, what: &str) {
    let Some(peak) = gpu.last_device_peak() else {
        eprintln!("{what}: the device has no stream-ordered pool to read a proof's peak from");
        return;
    };
    eprintln!(
        "{what}: a proof's device memory at its peak {} B, its room check asked {} B",
        peak.used, peak.asked
    );
    assert!(peak.used > 0, "{what}: a proof allocates on the device");
    assert!(peak.used <= peak.asked, "{what}: {peak:?}");
}

/// `w` proved on `gpu` and on the CPU with the same blinding: the same G1
/// parts and the same proof, which verifies. The GPU proof's steps.
fn prove_both(
    gpu: &CudaBackend,
    key: &ProvingKey,
    w: Synthesized,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> Vec<&'static str> {
    let ours = gpu.prove_start(key, w.clone()).unwrap();
    within_its_room(gpu, "prove_both");
    let cpu = CpuBackend.prove_start(key, w).unwrap();
    assert_eq!(ours.g1, cpu.g1, "G1 parts");
    let steps: Vec<&str> = ours.steps.iter().map(|s| s.step).collect();
    let public = ours.assignment.public_inputs().to_vec();
    let blind = Blinding::random(rng);
    let on_cpu = crate::groth16::prover::finish_on_cpu(key, cpu, blind);
    let finished = gpu.prove_finish(key, ours, blind).unwrap();
    assert_eq!(finished.proof, on_cpu, "the CPU's proof for the same blinding");
    assert!(finished.proof.verify(&key.vk, &public));
    steps
}

/// A streamed key's circuit keeps its matrices on the device where they
/// fit beside its proof (a 24 or 32 GiB card's 32 GiB sector): a and b are
/// computed there, C's rows checked against them without a vector for c,
/// and c made from C's rows once a·b has freed b. The proofs are the CPU's;
/// a witness that breaks a constraint is refused with the recorder's name
/// for it, as the input's fault.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_a_streamed_key_computes_a_b_and_c_on_the_device_two_vectors_at_a_time() {
    let Some(gpu) = backend(CudaOptions { bases: BasesLayout::Streamed, ..CudaOptions::default() }) else {
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    for b in [Builtin { shape: Shape::Bits, log_size: 12 }, Builtin { shape: Shape::Dense, log_size: 12 }] {
        let matrices = Arc::new(Matrices::record(b.circuit(None)).unwrap());
        let key = keygen::generate_test_key_for(&matrices, &mut rng).unwrap();
        assert_eq!(gpu.products(&key), ProductsPlacement::Gpu);
        for seed in [1u64, 2] {
            let steps = prove_both(&gpu, &key, matrices.assign(b.circuit(Some(seed))).unwrap(), &mut rng);
            assert!(steps.contains(&"products"), "{b:?}: {steps:?}");
        }
        let report = gpu.resident_keys();
        let got = report.keys.iter().find(|k| k.fingerprint == key.fingerprint()).unwrap();
        assert_eq!(got.layout, Some(BasesLayout::Streamed), "{b:?}");
        // The inputs' bases alone, at most (every input counted in B), then
        // the matrices beside them: `matrices_bytes` bounds their size from
        // above (it counts every row that could be long), so the device
        // holds more than the bases and no more than both.
        let inputs = key_bytes(&key, key.vk.ic.len(), G2Placement::Gpu, BasesLayout::Streamed).unwrap();
        assert!(got.device_bytes > inputs, "{b:?}: the matrices beside the inputs' bases");
        assert!(got.device_bytes <= inputs + matrices_bytes(&matrices), "{b:?}: the bases stay on the host");
        if b.shape != Shape::Bits {
            continue;
        }
        let honest = matrices.assign(b.circuit(Some(3))).unwrap().evaluated().unwrap();
        let mut wrong = honest.public_inputs().to_vec();
        wrong[1] += Scalar::ONE;
        let err =
            gpu.prove_start(&key, matrices.assign(b.circuit(Some(3)).claiming(wrong)).unwrap()).unwrap_err();
        assert!(err.to_string().contains("'out1'"), "{b:?}: named as the recorder names it: {err}");
        assert!(err.is_bad_input(), "{err:?}");
    }
}

/// With `G2Placement::Cpu` prove_start leaves B in G2 to prove_finish,
/// which computes it on the host; dense witnesses (every aux in A, half
/// in B: the device picks real subsets) prove the same as on the CPU.
/// One partition in flight: each vector is copied under the device lock,
/// while the one before it transforms.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_g2_on_the_host_and_dense_witnesses() {
    let options = CudaOptions {
        b_g2_msm: G2Placement::Cpu,
        partitions_in_flight: InFlight::One,
        ..CudaOptions::default()
    };
    let Some(gpu) = backend(options) else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    for k in [6u32, 12] {
        let dense = Builtin { shape: Shape::Dense, log_size: k };
        let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
        let w = synthesize(dense.circuit(Some(7))).unwrap();
        let ours = gpu.prove_start(&key, w.clone()).unwrap();
        let cpu = CpuBackend.prove_start(&key, w).unwrap();
        assert_eq!(ours.g1, cpu.g1, "dense-{k}: G1 parts");
        assert_eq!(ours.b_g2, None, "dense-{k}: B in G2 is left to prove_finish");
        let public = ours.assignment.public_inputs().to_vec();
        let blind = Blinding::random(&mut rng);
        let on_cpu = crate::groth16::prover::finish_on_cpu(&key, cpu, blind);
        let finished = gpu.prove_finish(&key, ours, blind).unwrap();
        assert_eq!(finished.proof, on_cpu, "dense-{k}");
        assert!(finished.proof.verify(&key.vk, &public), "dense-{k}");
    }
}

/// Shifted bases (the default, where they fit) give the sums plain bases
/// give and take their copies' bytes; a key memory limit too small for
/// the copies keeps the bases plain instead of refusing the key.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_shifted_bases_prove_what_plain_bases_prove() {
    let Some(shifted) = backend(CudaOptions::default()) else { return };
    let plain = backend(CudaOptions { bases: BasesLayout::Plain, ..CudaOptions::default() }).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    // every query has enough terms (2^13 or more) for the shifted layout at 2^14
    let dense = Builtin { shape: Shape::Dense, log_size: 14 };
    let key = keygen::generate_test_key(dense.circuit(None), &mut rng).unwrap();
    let w = synthesize(dense.circuit(Some(1))).unwrap();
    let cpu = CpuBackend.prove_start(&key, w.clone()).unwrap();
    let on_host = crate::groth16::prover::b_g2(&key, &cpu.assignment);
    let bytes = |gpu: &CudaBackend| gpu.resident_keys().keys[0].device_bytes;
    for (name, gpu) in [("shifted", &shifted), ("plain", &plain)] {
        let ours = gpu.prove_start(&key, w.clone()).unwrap();
        assert_eq!(ours.g1, cpu.g1, "{name}: G1 parts");
        assert_eq!(ours.b_g2, Some(on_host), "{name}: B in G2");
    }
    assert!(bytes(&shifted) > 8 * bytes(&plain), "{} against {}", bytes(&shifted), bytes(&plain));
    let limited = CudaOptions { key_memory_limit: Some(2 * bytes(&plain)), ..CudaOptions::default() };
    let limited = backend(limited).unwrap();
    let ours = limited.prove_start(&key, w).unwrap();
    assert_eq!(ours.g1, cpu.g1, "under a limit: G1 parts");
    assert_eq!(bytes(&limited), bytes(&plain), "under a limit the bases stay plain");
}

/// A key streamed from the host's memory (page-locked in place, B's G2
/// query too) proves what a resident key proves, and the proofs verify:
/// streamed by the config, and by itself where the key is larger than the
/// key memory limit (a card smaller than the key), with H by the chain that
/// holds two vectors at a time, and L's MSM beside H's where the device has
/// room for both, after it where it has not. (The stream's chunks, several
/// and partial, are tested in gpu-kernels' MSM tests.)
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_streamed_keys_prove_what_resident_keys_prove() {
    let Some(resident) = backend(CudaOptions { bases: BasesLayout::Plain, ..CudaOptions::default() }) else {
        return;
    };
    let streamed = backend(CudaOptions { bases: BasesLayout::Streamed, ..CudaOptions::default() }).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
    for (log, shape) in [(12, Shape::Dense), (20, Shape::Bits)] {
        let builtin = Builtin { shape, log_size: log };
        let key = keygen::generate_test_key(builtin.circuit(None), &mut rng).unwrap();
        let w = synthesize(builtin.circuit(Some(3))).unwrap();
        let public = w.public_inputs().to_vec();
        let want = resident.prove_start(&key, w.clone()).unwrap();
        let limited =
            CudaOptions { key_memory_limit: Some(key.resident_bytes() as u64 / 4), ..CudaOptions::default() };
        let limited = backend(limited).unwrap();
        // c left as a·b, as a GPU's host products leave it
        let mut ab = w.clone();
        let Evaluations::Host(abc) = &mut ab.abc else { panic!("the recorder evaluates a, b, c") };
        abc.c = None;
        for (name, gpu) in [("streamed", &streamed), ("over the limit", &limited)] {
            let ours = gpu.prove_start(&key, ab.clone()).unwrap();
            assert_eq!(ours.g1, want.g1, "{name}, 2^{log}: G1 parts, c made as a·b");
            let ours = gpu.prove_start(&key, w.clone()).unwrap();
            within_its_room(gpu, &format!("{name}, 2^{log}"));
            assert_eq!(ours.g1, want.g1, "{name}, 2^{log}: G1 parts");
            let steps: Vec<&str> = ours.steps.iter().map(|s| s.step).collect();
            assert!(steps.contains(&"msm h + l (beside)"), "{name}, 2^{log}: L beside H: {steps:?}");
            assert!(!steps.contains(&"msm l"), "{name}, 2^{log}: {steps:?}");
            assert_eq!(ours.b_g2, want.b_g2, "{name}, 2^{log}: B in G2, streamed too");
            assert!(ours.b_g2.is_some());
            let report = gpu.resident_keys();
            assert_eq!(report.keys[0].layout, Some(BasesLayout::Streamed), "{name}");
            assert!(report.keys[0].device_bytes < key.resident_bytes() as u64 / 100, "{name}: inputs only");
            let blind = Blinding::random(&mut rng);
            let finished = gpu.prove_finish(&key, ours, blind).unwrap();
            assert!(finished.proof.verify(&key.vk, &public), "{name}, 2^{log}: the proof verifies");
        }
        assert!(key.pinned.is_registered());

        // Room for the proof but not for L beside it (a ballast holds the
        // rest of the device): L after H, the same G1 parts, within the room.
        let alone = streamed.rules().proof_bytes(&key, BasesLayout::Streamed, ProductsPlacement::Cpu);
        let beside = residency::streamed_beside_bytes(key.domain_size().trailing_zeros(), key.l.len() as u64);
        streamed.gpu.memory_reclaimed().unwrap();
        let ballast = provd_kernels::Ballast::hold(&streamed.gpu, (alone + beside / 2) as usize).unwrap();
        let ours = streamed.prove_start(&key, w.clone()).unwrap();
        drop(ballast);
        within_its_room(&streamed, &format!("L after H, 2^{log}"));
        assert_eq!(ours.g1, want.g1, "L after H, 2^{log}: G1 parts");
        let steps: Vec<&str> = ours.steps.iter().map(|s| s.step).collect();
        assert!(steps.contains(&"msm l"), "2^{log}: no room for L beside H: {steps:?}");
        assert!(!steps.contains(&"msm h + l (beside)"), "2^{log}: {steps:?}");
    }
}

/// Two keys alternating: both stay resident while they fit (one upload
/// each); under a limit that holds one, each switch evicts the other and
/// re-uploads it, and proofs stay right in both cases.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_keeps_several_keys_and_evicts_the_least_recently_used() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let keys =
        [12u32, 13].map(|k| keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap());
    let alternate = |gpu: &CudaBackend, rounds: usize| {
        for r in 0..rounds {
            let (k, key) = [(12u32, &keys[0]), (13, &keys[1])][r % 2];
            let (proof, public) = prove(gpu, key, BenchCircuit::new(k, 4, Some(r as u64))).unwrap();
            assert!(proof.verify(&key.vk, &public), "bench-{k} round {r}");
        }
    };
    let Some(roomy) = backend(CudaOptions::default()) else { return };
    alternate(&roomy, 6);
    let res = roomy.resident_keys();
    assert!(res.keys.iter().all(|k| k.uploads == 1 && k.device_bytes > 0), "{res:?}");
    assert_eq!(res.evictions, 0);

    // plain bases: how B's bases split between inputs and aux does not change the total
    let larger = key_bytes(&keys[1], 0, G2Placement::Gpu, BasesLayout::Plain).unwrap();
    let limited = CudaOptions { key_memory_limit: Some(larger + larger / 4), ..CudaOptions::default() };
    let Some(short) = backend(limited) else { return };
    alternate(&short, 6);
    let res = short.resident_keys();
    assert_eq!(res.keys.iter().map(|k| k.uploads).sum::<u64>(), 6, "{res:?}");
    assert_eq!(res.evictions, 5);
    assert_eq!(res.keys.iter().filter(|k| k.device_bytes > 0).count(), 1, "{res:?}");
}

/// A key uploaded ahead of its first partition (PreloadSRS), with the B
/// input count its recorded matrices give, is the layout its partitions
/// use: not uploaded again, and their proofs verify. Evicted, it is
/// uploaded again by the next partition.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_a_preloaded_key_is_the_one_its_partitions_use_and_an_evicted_one_comes_back() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
    let circuit = || BenchCircuit::new(12, 4, None);
    let key = keygen::generate_test_key(circuit(), &mut rng).unwrap();
    let b_inputs = Matrices::record(circuit()).unwrap().densities()[1].ones();
    let Some(gpu) = backend(CudaOptions::default()) else { return };
    assert!(!gpu.preload(&key, b_inputs).unwrap(), "not resident before");
    assert!(gpu.preload(&key, b_inputs).unwrap(), "resident after");
    for seed in 0..3 {
        let (proof, public) = prove(&gpu, &key, BenchCircuit::new(12, 4, Some(seed))).unwrap();
        assert!(proof.verify(&key.vk, &public), "seed {seed}");
    }
    let uploads = |gpu: &CudaBackend| gpu.resident_keys().keys.iter().map(|k| k.uploads).sum::<u64>();
    assert_eq!(uploads(&gpu), 1, "the partitions used the preloaded bases");
    assert!(gpu.evict(&key) > 0);
    assert_eq!(gpu.evict(&key), 0, "nothing left to evict");
    let (proof, public) = prove(&gpu, &key, BenchCircuit::new(12, 4, Some(9))).unwrap();
    assert!(proof.verify(&key.vk, &public));
    assert_eq!(uploads(&gpu), 2, "uploaded again after the eviction");
}
