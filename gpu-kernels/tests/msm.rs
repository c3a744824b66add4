//! GPU MSM against blstrs's multi_exp: sizes, edge cases, skewed digits.

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use group::{Curve, Group};

use provd_kernels::{gpu_for_tests, G1Bases, G2Bases, Msm};
use rand::SeedableRng;
use rayon::prelude::*;

/// n distinct points of G1 or G2 quickly: per chunk, a random start and a running sum.
fn random_points<P: Group + Send>(n: usize, seed: u64) -> Vec<P> {
    let chunks: Vec<usize> = (0..n.div_ceil(4096)).collect();
    chunks
        .par_iter()
        .flat_map_iter(|&k| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (k as u64) << 32);
            let (mut p, step) = (P::random(&mut rng), P::random(&mut rng));
            let len = 4096.min(n - k * 4096);
            (0..len).map(move |_| {
                p += step;
                p
            })
        })
        .collect()
}

fn affine(points: &[G1Projective]) -> Vec<G1Affine> {
    let mut out = vec![G1Affine::default(); points.len()];
    G1Projective::batch_normalize(points, &mut out);
    out
}

fn random_scalars(n: usize, seed: u64) -> Vec<Scalar> {
    (0..n)
        .into_par_iter()
        .chunks(4096)
        .flat_map_iter(|c| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (c[0] as u64) << 32);
            c.into_iter().map(move |_| Scalar::random(&mut rng))
        })
        .collect()
}

/// The MSM with plain bases and with shifted copies (which it uses from
/// n ≥ 2^(c−1), c = 8 at n = 1000) against blst.
fn check(msm: &Msm, gpu: &provd_kernels::Gpu, points: &[G1Projective], scalars: &[Scalar], what: &str) {
    let want = G1Projective::multi_exp(points, scalars);
    let affine = affine(points);
    let bases = G1Bases::upload(gpu, &affine).unwrap();
    assert_eq!(msm.run(&bases, scalars).unwrap(), want, "{what}: n={}", scalars.len());
    drop(bases);
    let shifted = G1Bases::upload_shifted(gpu, &affine).unwrap();
    let c = shifted.shift_bits().unwrap();
    assert_eq!(shifted.bytes(), 96 * points.len() * 256usize.div_ceil(c as usize));
    assert_eq!(
        msm.run(&shifted, scalars).unwrap(),
        want,
        "{what}, shifted bases (c = {c}): n={}",
        scalars.len()
    );
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_matches_blst_at_many_sizes() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    for (i, n) in [1usize, 2, 7, 1000, 1 << 16, 1 << 20, 1 << 22].into_iter().enumerate() {
        let points = random_points::<G1Projective>(n, i as u64);
        check(&msm, &gpu, &points, &random_scalars(n, 100 + i as u64), "random");
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_edge_cases() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    let n = 5000;
    let mut points = random_points::<G1Projective>(n, 7);
    let mut scalars = random_scalars(n, 8);
    // zero scalars, r − 1, one, small values
    for (i, s) in scalars.iter_mut().take(200).enumerate() {
        *s = match i % 4 {
            0 => Scalar::ZERO,
            1 => -Scalar::ONE,
            2 => Scalar::ONE,
            _ => Scalar::from(i as u64),
        };
    }
    // the identity and repeated bases among the points
    points[300] = G1Projective::identity();
    points[301] = G1Projective::identity();
    let p399 = points[399];
    points[400..500].fill(p399);
    // a repeated base with equal scalars forces the doubling branch
    let s399 = scalars[399];
    scalars[400..500].fill(s399);
    // ... and with the negated scalar: P and −P in one bucket
    points[500..520].fill(p399);
    scalars[500..520].fill(-s399);
    check(&msm, &gpu, &points, &scalars, "edge values");
    check(&msm, &gpu, &points, &vec![Scalar::ZERO; n], "all zero");
    check(&msm, &gpu, &points, &vec![-Scalar::ONE; n], "all r−1");
    let big = 1 << 16;
    check(
        &msm,
        &gpu,
        &random_points::<G1Projective>(big, 9),
        &vec![Scalar::from(12345); big],
        "all equal (one bucket per window)",
    );
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_with_mostly_bit_scalars() {
    // Witnesses are mostly 0/1: nearly every digit lands in one bucket, which
    // the equal-segment accumulation and the partial-sum fixup must handle
    // (that bucket's partials span many segments: msm_fixup_long sums them).
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    let n = 1 << 18;
    let mut scalars = random_scalars(n, 11);
    for (i, s) in scalars.iter_mut().enumerate() {
        if i % 5 != 0 {
            *s = Scalar::from((i % 2) as u64);
        }
    }
    check(&msm, &gpu, &random_points::<G1Projective>(n, 12), &scalars, "bits");
    // fewer scalars than bases
    let points = random_points::<G1Projective>(1000, 13);
    let bases = G1Bases::upload(&gpu, &affine(&points)).unwrap();
    let s = random_scalars(600, 14);
    assert_eq!(msm.run(&bases, &s).unwrap(), G1Projective::multi_exp(&points[..600], &s));
    assert!(msm.run(&bases, &random_scalars(1001, 1)).is_err());
    assert_eq!(msm.run(&bases, &[]).unwrap(), G1Projective::identity());
    // ... with shifted copies: copy k of base i sits at k·1000 + i, not k·600 + i
    let shifted = G1Bases::upload_shifted(&gpu, &affine(&points)).unwrap();
    assert_eq!(msm.run(&shifted, &s).unwrap(), G1Projective::multi_exp(&points[..600], &s));
    assert_eq!(msm.run(&shifted, &[]).unwrap(), G1Projective::identity());
}

/// A witness's mix: of every 100 terms, `zeros` zero, `ones` one, the rest random.
fn witness_scalars(n: usize, zeros: usize, ones: usize, seed: u64) -> Vec<Scalar> {
    let mut scalars = random_scalars(n, seed);
    for (i, s) in scalars.iter_mut().enumerate() {
        // spread the classes over the terms rather than in runs
        match (i * 37) % 100 {
            k if k < zeros => *s = Scalar::ZERO,
            k if k < zeros + ones => *s = Scalar::ONE,
            _ => {}
        }
    }
    scalars
}

/// Plain bases whose scalars are mostly 0 and 1 take the split path (the
/// ones' bases summed, Pippenger over the rest, listed); where more than half
/// are wider, Pippenger over all. Both sides of that line, and the lists'
/// edges, against blst.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_split_by_scalar() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    let n = (1 << 18) + 7;
    let mut points = random_points::<G1Projective>(n, 71);
    // repeated bases and the identity among the ones: the sum's doubling and
    // identity branches
    let p5 = points[5];
    points[1000..1100].fill(p5);
    points[2000] = G1Projective::identity();
    let mix = witness_scalars(n, 51, 47, 72);
    check(&msm, &gpu, &points, &mix, "witness mix (51% zero, 47% one)");
    let mut ones = vec![Scalar::ONE; n];
    check(&msm, &gpu, &points, &ones, "all one");
    check(&msm, &gpu, &points, &witness_scalars(n, 50, 50, 73), "zeros and ones only");
    // exactly half wider (split), then one more (Pippenger over all)
    let m = 10_000;
    for (i, s) in ones.iter_mut().take(m).enumerate() {
        if i < m / 2 {
            *s = Scalar::from(3 + i as u64);
        }
    }
    check(&msm, &gpu, &points[..m], &ones[..m], "half wider");
    ones[m / 2] = -Scalar::ONE;
    check(&msm, &gpu, &points[..m], &ones[..m], "just over half wider");
    check(&msm, &gpu, &points[..1], &[Scalar::ONE], "a single one");
    check(&msm, &gpu, &points[..3], &[Scalar::ZERO, Scalar::from(2), Scalar::ONE], "one of each");

    // G2, B's query: the same split
    let n2 = 30_000;
    let g2 = random_points::<G2Projective>(n2, 74);
    check_g2(&msm, &gpu, &g2, &witness_scalars(n2, 48, 48, 75), "witness mix");
    check_g2(&msm, &gpu, &g2, &vec![Scalar::ONE; n2], "all one");

    // streamed, a chunk's split each
    let affine_points = affine(&points);
    // SAFETY: `affine_points` outlives `host` and is not written meanwhile.
    let host =
        unsafe { provd_kernels::HostBases::<provd_kernels::G1>::register(&gpu, &affine_points) }.unwrap();
    let d_mix = gpu.upload(&mix).unwrap();
    let want = G1Projective::multi_exp(&points, &mix);
    assert_eq!(msm.run_streamed(host.view(..), 1 << 16, &d_mix, n).unwrap(), want, "streamed witness mix");
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_with_bases_streamed_from_the_hosts_memory() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    // not a multiple of the chunk, and fewer terms than bases
    let n = (1 << 18) + 12345;
    let projective = random_points::<G1Projective>(n + 100, 21);
    let points = affine(&projective);
    let scalars = random_scalars(n, 22);
    // SAFETY: `points` outlives `host` and is not written meanwhile.
    let host = unsafe { provd_kernels::HostBases::<provd_kernels::G1>::register(&gpu, &points) }.unwrap();
    assert_eq!(host.bytes(), (n + 100) * 96);
    let d_scalars = gpu.upload(&scalars).unwrap();
    let want = G1Projective::multi_exp(&projective[..n], &scalars);
    for chunk in [1 << 16, 100_000, n, 1 << 20] {
        assert_eq!(msm.run_streamed(host.view(..), chunk, &d_scalars, n).unwrap(), want, "chunks of {chunk}");
    }
    // a range that starts past the first bases (as a query's aux part does)
    let tail = msm.run_streamed(host.view(100..), 1 << 16, &d_scalars, n).unwrap();
    assert_eq!(tail, G1Projective::multi_exp(&projective[100..100 + n], &scalars));
    // one chunk only, and an empty MSM
    let small = msm.run_streamed(host.view(..), 1 << 16, &d_scalars, 1000).unwrap();
    assert_eq!(small, G1Projective::multi_exp(&projective[..1000], &scalars[..1000]));
    assert_eq!(msm.run_streamed(host.view(..), 1 << 16, &d_scalars, 0).unwrap(), G1Projective::identity());
    assert!(msm.run_streamed(host.view(..), 1 << 16, &d_scalars, n + 1).is_err());
    // Registered again once released: the registration went with `host`.
    drop(host);
    let again = unsafe { provd_kernels::HostBases::<provd_kernels::G1>::register(&gpu, &points) }.unwrap();
    assert_eq!(msm.run_streamed(again.view(..), 1 << 17, &d_scalars, n).unwrap(), want);

    // G2 the same way (B's G2 query of a streamed key), over a partial chunk.
    let n2 = 20_000;
    let g2 = random_points::<G2Projective>(n2 + 10, 23);
    let mut g2_affine = vec![G2Affine::default(); g2.len()];
    G2Projective::batch_normalize(&g2, &mut g2_affine);
    let host2 = unsafe { provd_kernels::HostBases::<provd_kernels::G2>::register(&gpu, &g2_affine) }.unwrap();
    assert_eq!(host2.bytes(), (n2 + 10) * 192);
    let got = msm.run_streamed(host2.view(10..), 7_000, &d_scalars, n2).unwrap();
    assert_eq!(got, G2Projective::multi_exp(&g2[10..], &scalars[..n2]), "G2 streamed");
}

/// Two streamed MSMs at once, as a streamed proof runs L beside H: one on
/// the device's stream, one on an engine of its own, from two threads over
/// two registrations, each against blst (the second reads scalars the
/// device's stream wrote, so the streams must be ordered by them).
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn two_engines_stream_at_once() {
    let Some(gpu) = gpu_for_tests() else { return };
    let (h_engine, l_engine) = (Msm::new(gpu.clone()), Msm::on_own_stream(gpu.clone()).unwrap());
    let n = (1 << 18) + 333;
    let (h_points, l_points) = (random_points::<G1Projective>(n, 41), random_points::<G1Projective>(n, 42));
    let (h_affine, l_affine) = (affine(&h_points), affine(&l_points));
    let h_scalars = random_scalars(n, 43);
    // a witness's mix for L: its split path (ones summed, the rest listed)
    let l_scalars = witness_scalars(n, 40, 55, 44);
    let want =
        (G1Projective::multi_exp(&h_points, &h_scalars), G1Projective::multi_exp(&l_points, &l_scalars));
    // SAFETY: the points outlive the registrations and are not written meanwhile.
    let h_host = unsafe { provd_kernels::HostBases::<provd_kernels::G1>::register(&gpu, &h_affine) }.unwrap();
    let l_host = unsafe { provd_kernels::HostBases::<provd_kernels::G1>::register(&gpu, &l_affine) }.unwrap();
    for round in 0..3 {
        let (d_h, d_l) = (gpu.upload(&h_scalars).unwrap(), gpu.upload(&l_scalars).unwrap());
        let got = std::thread::scope(|s| {
            let l = s.spawn(|| l_engine.run_streamed(l_host.view(..), 1 << 16, &d_l, n).unwrap());
            let h = h_engine.run_streamed(h_host.view(..), 1 << 16, &d_h, n).unwrap();
            (h, l.join().unwrap())
        });
        assert_eq!(got, want, "round {round}: (H on the device's stream, L on its own)");
    }
}

/// Bases written a chunk at a time, in another order than the host's (as
/// H's are), sum as the reordered bases do, plain and shifted; over several
/// chunks and a partial one.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn msm_with_bases_written_a_chunk_at_a_time() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    let n = (1 << 17) + 4321;
    let points = affine(&random_points::<G1Projective>(n, 31));
    let scalars = random_scalars(n, 32);
    // position p holds point n − 1 − p
    let reversed: Vec<G1Affine> = points.iter().rev().copied().collect();
    let fill = |start: usize, chunk: &mut [G1Affine]| {
        for (p, slot) in (start..).zip(chunk) {
            *slot = points[n - 1 - p];
        }
    };
    let want =
        G1Projective::multi_exp(&reversed.iter().map(G1Projective::from).collect::<Vec<_>>(), &scalars);
    let plain = G1Bases::upload_from(&gpu, n, fill).unwrap();
    assert_eq!(plain.len(), n);
    assert_eq!(msm.run(&plain, &scalars).unwrap(), want, "plain");
    drop(plain);
    let shifted = G1Bases::upload_shifted_from(&gpu, n, fill).unwrap();
    assert_eq!(shifted.bytes(), G1Bases::upload_shifted(&gpu, &reversed).unwrap().bytes());
    assert_eq!(msm.run(&shifted, &scalars).unwrap(), want, "shifted");
}

fn check_g2(msm: &Msm, gpu: &provd_kernels::Gpu, points: &[G2Projective], scalars: &[Scalar], what: &str) {
    let mut affine = vec![G2Affine::default(); points.len()];
    G2Projective::batch_normalize(points, &mut affine);
    let bases = G2Bases::upload(gpu, &affine).unwrap();
    assert_eq!(bases.bytes(), 192 * points.len());
    let got = msm.run(&bases, scalars).unwrap();
    assert_eq!(got, G2Projective::multi_exp(points, scalars), "G2, {what}: n={}", scalars.len());
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn g2_msm_matches_blst() {
    let Some(gpu) = gpu_for_tests() else { return };
    let msm = Msm::new(gpu.clone());
    for (i, n) in [1usize, 2, 7, 1000, 1 << 14].into_iter().enumerate() {
        check_g2(
            &msm,
            &gpu,
            &random_points::<G2Projective>(n, 40 + i as u64),
            &random_scalars(n, 50 + i as u64),
            "random",
        );
    }
    // zero scalars, r − 1, the identity, a repeated base with equal scalars
    let n = 3000;
    let mut points = random_points::<G2Projective>(n, 60);
    let mut scalars = random_scalars(n, 61);
    for (i, s) in scalars.iter_mut().take(100).enumerate() {
        *s = if i % 2 == 0 { Scalar::ZERO } else { -Scalar::ONE };
    }
    points[200] = G2Projective::identity();
    let p299 = points[299];
    points[300..340].fill(p299);
    let s299 = scalars[299];
    scalars[300..340].fill(s299);
    check_g2(&msm, &gpu, &points, &scalars, "edge values");
    check_g2(&msm, &gpu, &points, &vec![Scalar::from(777); n], "all equal");
    check_g2(&msm, &gpu, &points, &vec![Scalar::ZERO; n], "all zero");
}
