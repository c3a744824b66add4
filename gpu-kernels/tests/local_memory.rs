//! The context's local memory is sized when the device is opened: kernels
//! launched after open take no more device memory for it. A binary of its
//! own, so that this test's context is the process's first and nothing
//! launched before it grew the local memory. Runs on a CUDA device; says
//! "skipped: no CUDA device" elsewhere.

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use group::{Curve, Group};
use provd_kernels::{gpu_for_tests, FrBuffer, G1Bases, G2Bases, Msm, Ntt, Order};
use rand::SeedableRng;

/// What the driver may take for itself between two readings (its own
/// bookkeeping). Growing local memory by even 128 B a thread takes more:
/// 33 MiB on an H100 (2048 threads × 132 SMs).
const SLACK: usize = 16 << 20;

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn kernels_launched_after_open_take_no_more_device_memory() {
    let Some(gpu) = gpu_for_tests() else { return };
    let sized = gpu.info().local_memory.clone();
    eprintln!("local memory at open: {sized:?}");
    assert!(sized.kernels > 0, "the driver listed no kernels: {sized:?}");
    assert!(sized.stack_per_thread >= sized.largest_frame, "{sized:?}");
    let (at_open, _) = gpu.memory_reclaimed().unwrap();

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let n = 1 << 14;
    let g1: Vec<G1Projective> = (0..n).map(|_| G1Projective::random(&mut rng)).collect();
    let g2: Vec<G2Projective> = (0..n).map(|_| G2Projective::random(&mut rng)).collect();
    let random: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
    // mostly 0 and 1: the split path (classify, the ones' sum, its trees)
    let witness: Vec<Scalar> = random
        .iter()
        .enumerate()
        .map(|(i, s)| match i % 10 {
            0..=4 => Scalar::ZERO,
            5..=8 => Scalar::ONE,
            _ => *s,
        })
        .collect();
    let mut g1_affine = vec![G1Affine::default(); n];
    G1Projective::batch_normalize(&g1, &mut g1_affine);
    let mut g2_affine = vec![G2Affine::default(); n];
    G2Projective::batch_normalize(&g2, &mut g2_affine);

    let msm = Msm::new(gpu.clone());
    {
        let plain = G1Bases::upload(&gpu, &g1_affine).unwrap();
        let shifted = G1Bases::upload_shifted(&gpu, &g1_affine).unwrap();
        let g2_bases = G2Bases::upload(&gpu, &g2_affine).unwrap();
        for scalars in [&random, &witness] {
            let want = G1Projective::multi_exp(&g1, scalars);
            assert_eq!(msm.run(&plain, scalars).unwrap(), want, "G1, plain");
            assert_eq!(msm.run(&shifted, scalars).unwrap(), want, "G1, shifted");
            assert_eq!(msm.run(&g2_bases, scalars).unwrap(), G2Projective::multi_exp(&g2, scalars), "G2");
        }
        let mut ntt = Ntt::new(gpu.clone());
        let mut buf = FrBuffer::upload(&gpu, &random).unwrap();
        let order = ntt.coset_forward(&mut buf, Order::Natural).unwrap();
        ntt.coset_inverse(&mut buf, order).unwrap();
        assert_eq!(buf.download(&gpu).unwrap(), random, "coset round trip");
    }

    let (after, _) = gpu.memory_reclaimed().unwrap();
    eprintln!("free: {at_open} B at open, {after} B after G1, G2 and NTT kernels, everything dropped");
    assert!(
        after + SLACK >= at_open,
        "the kernels took {} MiB that stayed taken once their buffers were freed \
         ({at_open} B free at open, {after} B after; local memory at open: {sized:?})",
        (at_open - after) >> 20
    );
}
