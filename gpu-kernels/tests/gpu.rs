//! GPU tests: run on a CUDA device, and say "skipped: no CUDA device" elsewhere.

use blst::blst_fp;
use blstrs::Scalar;
use cudarc::driver::{LaunchConfig, PushKernelArg};
use ff::{Field, PrimeField};
use provd_kernels::field::DeviceField;
use provd_kernels::ntt::root_of_unity;
use provd_kernels::{
    gpu_for_tests, select_by_density, DeviceMatrix, FrBuffer, Gpu, HChain, Ntt, Order, PageLocked,
    Unsatisfied, AUX_COLUMN, SHORT_ROW_TERMS,
};
use rand::{RngCore, SeedableRng};

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Runs `<field>_ops` on (a, b) and returns [a·b, a², a+b, a−b] per pair, from
/// an output buffer poisoned beforehand so an unwritten element shows.
fn field_ops<F: DeviceField + Default>(gpu: &Gpu, kernel: &str, a: &[F], b: &[F]) -> Vec<F> {
    let n = a.len() as u32;
    let da = gpu.upload(a).unwrap();
    let db = gpu.upload(b).unwrap();
    let mut out = gpu.stream().clone_htod(&vec![F::POISON; 4 * a.len()]).unwrap();
    let f = gpu_function(gpu, kernel);
    let mut l = gpu.stream().launch_builder(&f);
    l.arg(&mut out).arg(&da).arg(&db).arg(&n);
    // 256 threads: a 1024-thread block would need more registers than an SM has.
    let cfg = LaunchConfig { grid_dim: (n.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    unsafe { l.launch(cfg) }.unwrap();
    gpu.download::<F>(&out).unwrap()
}

fn gpu_function(gpu: &Gpu, name: &str) -> cudarc::driver::CudaFunction {
    gpu.function_for_tests(name).unwrap()
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn fr_arithmetic_matches_blst() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut r = rng(1);
    let edges = [Scalar::ZERO, Scalar::ONE, -Scalar::ONE, Scalar::from(2), -Scalar::from(2)];
    let n = 1 << 21;
    let mut a: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut r)).collect();
    let mut b: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut r)).collect();
    for (i, x) in edges.iter().enumerate() {
        for (j, y) in edges.iter().enumerate() {
            a[i * edges.len() + j] = *x;
            b[i * edges.len() + j] = *y;
        }
    }
    let out = field_ops(&gpu, "fr_ops", &a, &b);
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        assert_eq!(out[4 * i], x * y, "mul #{i}");
        assert_eq!(out[4 * i + 1], x.square(), "sqr #{i}");
        assert_eq!(out[4 * i + 2], x + y, "add #{i}");
        assert_eq!(out[4 * i + 3], x - y, "sub #{i}");
    }
}

fn fp_from_be(bytes: &[u8; 48]) -> blst_fp {
    let mut out = blst_fp::default();
    unsafe { blst::blst_fp_from_bendian(&mut out, bytes.as_ptr()) };
    out
}

fn fp_op(
    f: unsafe extern "C" fn(*mut blst_fp, *const blst_fp, *const blst_fp),
    x: &blst_fp,
    y: &blst_fp,
) -> blst_fp {
    let mut out = blst_fp::default();
    unsafe { f(&mut out, x, y) };
    out
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn fp_arithmetic_matches_blst() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut r = rng(2);
    let p_minus_1 = fp_from_be(&hex48(
        "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaaa",
    ));
    let one = fp_from_be(&{
        let mut b = [0u8; 48];
        b[47] = 1;
        b
    });
    let edges = [blst_fp::default(), one, p_minus_1];
    let n = 1 << 20;
    let random = |r: &mut rand_chacha::ChaCha8Rng| {
        let mut b = [0u8; 48];
        r.fill_bytes(&mut b);
        b[0] &= 0x0f; // below p
        fp_from_be(&b)
    };
    let mut a: Vec<blst_fp> = (0..n).map(|_| random(&mut r)).collect();
    let mut b: Vec<blst_fp> = (0..n).map(|_| random(&mut r)).collect();
    for (i, x) in edges.iter().enumerate() {
        for (j, y) in edges.iter().enumerate() {
            a[i * 3 + j] = *x;
            b[i * 3 + j] = *y;
        }
    }
    let out = field_ops(&gpu, "fp_ops", &a, &b);
    for i in 0..n {
        let (x, y) = (&a[i], &b[i]);
        let mut sq = blst_fp::default();
        unsafe { blst::blst_fp_sqr(&mut sq, x) };
        assert_eq!(out[4 * i], fp_op(blst::blst_fp_mul, x, y), "mul #{i}");
        assert_eq!(out[4 * i + 1], sq, "sqr #{i}");
        assert_eq!(out[4 * i + 2], fp_op(blst::blst_fp_add, x, y), "add #{i}");
        assert_eq!(out[4 * i + 3], fp_op(blst::blst_fp_sub, x, y), "sub #{i}");
    }
}

fn hex48(s: &str) -> [u8; 48] {
    let mut out = [0u8; 48];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn random_scalars(n: usize, seed: u64) -> Vec<Scalar> {
    let mut r = rng(seed);
    (0..n).map(|_| Scalar::random(&mut r)).collect()
}

/// p(x) at x by Horner's rule.
fn eval(coeffs: &[Scalar], x: Scalar) -> Scalar {
    coeffs.iter().rev().fold(Scalar::ZERO, |acc, c| acc * x + c)
}

fn bitrev(i: usize, log_n: u32) -> usize {
    if log_n == 0 {
        0
    } else {
        i.reverse_bits() >> (usize::BITS - log_n)
    }
}

/// Checks every element (small n) or a spread of elements (large n) of
/// `out` (in `order`) against direct evaluation at shift·ω^i.
fn check_evals(coeffs: &[Scalar], out: &[Scalar], order: Order, shift: Scalar, what: &str) {
    let log_n = coeffs.len().trailing_zeros();
    let omega = root_of_unity(log_n);
    let n = coeffs.len();
    let indices: Vec<usize> = if n <= 1 << 10 {
        (0..n).collect()
    } else {
        vec![0, 1, 2, 3, n / 2, n / 2 + 1, n - 2, n - 1, 12345 % n]
    };
    for i in indices {
        let pos = if order == Order::Natural { i } else { bitrev(i, log_n) };
        let x = shift * omega.pow_vartime([i as u64]);
        assert_eq!(out[pos], eval(coeffs, x), "{what}: n=2^{log_n}, evaluation {i}");
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn ntt_forward_inverse_and_cosets() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut ntt = Ntt::new(gpu.clone());
    let g = Scalar::MULTIPLICATIVE_GENERATOR;
    // small, odd-log, past one pass (10 stages), past two, and large
    for log_n in [0u32, 1, 2, 3, 5, 7, 10, 11, 13, 17, 20, 21, 24] {
        let n = 1usize << log_n;
        let coeffs = random_scalars(n, log_n as u64);
        for input in [Order::Natural, Order::BitReversed] {
            let host_in: Vec<Scalar> = if input == Order::Natural {
                coeffs.clone()
            } else {
                (0..n).map(|p| coeffs[bitrev(p, log_n)]).collect()
            };
            let mut buf = FrBuffer::upload(&gpu, &host_in).unwrap();
            let out_order = ntt.forward(&mut buf, input).unwrap();
            assert_ne!(out_order, input);
            check_evals(&coeffs, &buf.download(&gpu).unwrap(), out_order, Scalar::ONE, "forward");
            let back = ntt.inverse(&mut buf, out_order).unwrap();
            assert_eq!(back, input);
            assert_eq!(buf.download(&gpu).unwrap(), host_in, "inverse(forward(x)) = x, n=2^{log_n}");

            let out_order = ntt.coset_forward(&mut buf, input).unwrap();
            check_evals(&coeffs, &buf.download(&gpu).unwrap(), out_order, g, "coset forward");
            ntt.coset_inverse(&mut buf, out_order).unwrap();
            assert_eq!(buf.download(&gpu).unwrap(), host_in, "coset round trip, n=2^{log_n}");
        }
        // bit reversal is an involution that matches the index permutation
        let mut buf = FrBuffer::upload(&gpu, &coeffs).unwrap();
        ntt.bit_reverse(&mut buf).unwrap();
        let rev = buf.download(&gpu).unwrap();
        assert!((0..n).all(|p| rev[p] == coeffs[bitrev(p, log_n)]));

        // Natural order in and out (the last pass writes reversed into a second
        // buffer): every element equals forward + bit reversal, checked above.
        // Twice, so that the second call writes over the first's stale buffer.
        ntt.forward(&mut buf, Order::BitReversed).unwrap(); // bit-reversed coefficients → natural evaluations
        let expected = buf.download(&gpu).unwrap();
        for round in 0..2 {
            let mut nat = FrBuffer::upload(&gpu, &coeffs).unwrap();
            ntt.forward_natural(&mut nat).unwrap();
            let got = nat.download(&gpu).unwrap();
            let wrong = (0..n).filter(|&i| got[i] != expected[i]).count();
            assert_eq!(wrong, 0, "forward_natural, n=2^{log_n}, round {round}: {wrong} elements differ");
            check_evals(&coeffs, &got, Order::Natural, Scalar::ONE, "forward natural");
            ntt.inverse_natural(&mut nat).unwrap();
            assert_eq!(
                nat.download(&gpu).unwrap(),
                coeffs,
                "inverse_natural(forward_natural(x)) = x, n=2^{log_n}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn quotient_chain_matches_definition() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut ntt = Ntt::new(gpu.clone());
    for log_n in [1u32, 4, 11, 16, 20] {
        let n = 1usize << log_n;
        // A·B − C must vanish on the domain for H to be a polynomial: take C = A·B
        // there, except that we add a multiple of Z via random a, b and c = a·b.
        let a = random_scalars(n, 100 + log_n as u64);
        let b = random_scalars(n, 200 + log_n as u64);
        let c: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        let mut da = FrBuffer::upload(&gpu, &a).unwrap();
        let order = ntt
            .quotient(&mut da, FrBuffer::upload(&gpu, &b).unwrap(), FrBuffer::upload(&gpu, &c).unwrap())
            .unwrap();
        assert_eq!(order, Order::BitReversed);
        let h_rev = da.download(&gpu).unwrap();
        let h: Vec<Scalar> = (0..n).map(|i| h_rev[bitrev(i, log_n)]).collect();
        assert_eq!(h[n - 1], Scalar::ZERO, "deg H ≤ n − 2");
        // Check A(x)·B(x) − C(x) = H(x)·Z(x) at a random point off the domain,
        // with A, B, C interpolated from their evaluations (inverse NTT on the GPU,
        // itself checked above).
        let mut coeffs = |v: &[Scalar]| {
            let mut buf = FrBuffer::upload(&gpu, v).unwrap();
            let o = ntt.inverse(&mut buf, Order::Natural).unwrap();
            let w = buf.download(&gpu).unwrap();
            (0..n).map(|i| if o == Order::Natural { w[i] } else { w[bitrev(i, log_n)] }).collect::<Vec<_>>()
        };
        let (pa, pb, pc) = (coeffs(&a), coeffs(&b), coeffs(&c));
        let x = Scalar::random(&mut rng(log_n as u64));
        let z = x.pow_vartime([n as u64]) - Scalar::ONE;
        assert_eq!(eval(&pa, x) * eval(&pb, x) - eval(&pc, x), eval(&h, x) * z, "n=2^{log_n}");
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn bad_lengths_are_errors() {
    let Some(gpu) = gpu_for_tests() else { return };
    let err = FrBuffer::upload(&gpu, &random_scalars(3, 1)).err().unwrap();
    assert!(err.to_string().contains("power of two"), "{err}");
}

/// The copy-stream upload and the per-vector chain give what the one-call
/// chain gives, with uploads interleaved with transforms as the prover does.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn interleaved_uploads_match_the_one_call_quotient() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut ntt = Ntt::new(gpu.clone());
    let log_n = 16;
    let n = 1usize << log_n;
    // shorter than the domain, so the padding is exercised
    let [a, b, c] = [1u64, 2, 3].map(|s| random_scalars(n - 5, 300 + s));
    let mut whole = FrBuffer::upload_padded(&gpu, &a, log_n).unwrap();
    let up = |v: &[Scalar]| FrBuffer::upload_padded(&gpu, v, log_n).unwrap();
    ntt.quotient(&mut whole, up(&b), up(&c)).unwrap();
    let mut parts = Vec::new();
    let lane = gpu.copy_lane().unwrap();
    for v in [&a, &b, &c] {
        let mut d = FrBuffer::upload_padded_async(&lane, v, log_n).unwrap();
        ntt.to_coset(HChain::Quotient, &mut d).unwrap();
        parts.push(d);
    }
    let [mut da, db, dc]: [FrBuffer; 3] = parts.try_into().ok().unwrap();
    assert_eq!(ntt.h_from_coset(HChain::Quotient, &mut da, db, dc).unwrap(), Order::BitReversed);
    assert!(da.download(&gpu).unwrap() == whole.download(&gpu).unwrap());
}

/// Out of a vector page-locked in place the copy is one DMA; out of one left
/// pageable, it goes through the staging slots. Both give the vector
/// (zero-padded where asked), and the host memory may be freed as soon as
/// the call returns.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn page_locked_uploads_copy_the_vector() {
    let Some(gpu) = gpu_for_tests() else { return };
    let log_n = 22;
    // 96 MiB, over the size from which vectors are locked; short of the domain.
    let v = random_scalars((1 << log_n) - (1 << 20) - 3, 400);
    let expected = {
        let mut e = v.clone();
        e.resize(1 << log_n, Scalar::ZERO);
        e
    };
    let lane = gpu.copy_lane().unwrap();
    let locked = PageLocked::new(&gpu, v.as_slice());
    assert!(locked.is_locked(), "96 MiB is locked");
    // Left pageable: through the staging slots.
    let staged = lane.upload_locked(&PageLocked::pageable(&v[1..])).unwrap();
    assert!(gpu.download::<Scalar>(&staged).unwrap() == v[1..]);
    let padded = FrBuffer::upload_padded_locked(&lane, &locked, log_n).unwrap();
    drop(locked);
    assert!(padded.download(&gpu).unwrap() == expected);
    // An owned vector, freed with its lock once copied.
    let owned = PageLocked::new(&gpu, v.clone());
    assert!(owned.is_locked());
    let copied = lane.upload_locked(&owned).unwrap();
    drop(owned);
    assert!(gpu.download::<Scalar>(&copied).unwrap() == v);
    // Small vectors are not worth locking.
    assert!(!PageLocked::new(&gpu, &v[..1024]).is_locked());
}

/// Two vectors at a time (c copied only once b is freed) gives what three at
/// a time gives, for both chains.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn the_two_at_a_time_chain_matches_the_three_at_a_time_one() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut ntt = Ntt::new(gpu.clone());
    let lane = gpu.copy_lane().unwrap();
    let log_n = 14;
    let [a, b, c] = [1u64, 2, 3].map(|s| random_scalars((1 << log_n) - 7, 400 + s));
    for chain in [HChain::Quotient, HChain::OddCoset] {
        let on_coset = |ntt: &mut Ntt, v: &[Scalar]| -> Result<FrBuffer, provd_kernels::GpuError> {
            let mut d = FrBuffer::upload_padded_async(&lane, v, log_n)?;
            ntt.to_coset(chain, &mut d)?;
            Ok(d)
        };
        let mut three = on_coset(&mut ntt, &a).unwrap();
        let (b3, c3) = (on_coset(&mut ntt, &b).unwrap(), on_coset(&mut ntt, &c).unwrap());
        let order = ntt.h_from_coset(chain, &mut three, b3, c3).unwrap();
        let mut two = on_coset(&mut ntt, &a).unwrap();
        let b2 = on_coset(&mut ntt, &b).unwrap();
        let made_c = std::cell::Cell::new(false);
        let order2 = ntt
            .h_from_coset_two_at_a_time(chain, &mut two, b2, |ntt| {
                made_c.set(true);
                on_coset(ntt, &c)
            })
            .unwrap();
        assert!(made_c.get());
        assert_eq!(order, order2, "{chain:?}");
        assert!(two.download(&gpu).unwrap() == three.download(&gpu).unwrap(), "{chain:?}");
    }
}

/// select_by_density picks what a host filter picks, in order, at densities
/// from empty to full and lengths that end mid-word.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn density_selection_matches_a_host_filter() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut r = rng(7);
    for (len, percent) in [(1usize, 100u32), (63, 50), (64, 0), (1000, 100), (100_003, 30), (1 << 20, 80)] {
        let scalars = random_scalars(len, len as u64);
        let mut words = vec![0u64; len.div_ceil(64)];
        for i in 0..len {
            if r.next_u32() % 100 < percent {
                words[i / 64] |= 1 << (i % 64);
            }
        }
        let expected: Vec<Scalar> =
            (0..len).filter(|i| words[i / 64] >> (i % 64) & 1 == 1).map(|i| scalars[i]).collect();
        let src = gpu.upload_async(&scalars).unwrap();
        let (picked, ones) = select_by_density(&gpu, &src, len, &words).unwrap();
        assert_eq!(ones, expected.len(), "len {len}, {percent}%");
        let got = gpu.download::<Scalar>(&picked).unwrap();
        assert!(got[..ones] == expected[..], "len {len}, {percent}%");
    }
    // a bit past the scalars is refused, not read out of bounds
    let src = gpu.upload_async(&random_scalars(10, 1)).unwrap();
    assert!(select_by_density(&gpu, &src, 10, &[1 << 10]).is_err());
    assert!(select_by_density(&gpu, &src, 11, &[1]).is_err(), "more scalars than the buffer holds");
}

/// A matrix in compressed rows, as [`DeviceMatrix::upload`] takes it.
struct RandomMatrix {
    row_start: Vec<usize>,
    cols: Vec<u32>,
    values: Vec<Scalar>,
    coefficient_of: Vec<u32>,
}

/// A matrix of `rows` rows with 0 to 7 terms each over `inputs` inputs and
/// `aux` aux variables, about half its coefficients one (the cheap path) and
/// the others drawn from `pool` random values (0: a new value each); and
/// its product with (input, aux) on the host.
fn random_matrix(
    rows: usize,
    (inputs, aux): (usize, usize),
    pool: usize,
    seed: u64,
    input: &[Scalar],
    aux_values: &[Scalar],
) -> (RandomMatrix, Vec<Scalar>) {
    let mut r = rng(seed);
    let mut m =
        RandomMatrix { row_start: vec![0], cols: vec![], values: vec![Scalar::ONE], coefficient_of: vec![] };
    m.values.extend((0..pool).map(|_| Scalar::random(&mut r)));
    let mut product = vec![];
    for row in 0..rows {
        // Mostly short rows; every 97th a long one (summed by a warp), some
        // of them at the bound between the two.
        let terms = match row % 97 {
            5 => SHORT_ROW_TERMS as u32 + 1 + r.next_u32() % 1000,
            6 => SHORT_ROW_TERMS as u32 + r.next_u32() % 2,
            _ => r.next_u32() % 8,
        };
        let mut acc = Scalar::ZERO;
        for _ in 0..terms {
            let (col, v) = if aux > 0 && !r.next_u32().is_multiple_of(4) {
                let i = r.next_u32() % aux as u32;
                (AUX_COLUMN | i, aux_values[i as usize])
            } else {
                let i = r.next_u32() % inputs as u32;
                (i, input[i as usize])
            };
            let index = match (r.next_u32().is_multiple_of(2), pool) {
                (true, _) => 0,
                (false, 0) => {
                    m.values.push(Scalar::random(&mut r));
                    m.values.len() - 1
                }
                (false, _) => 1 + r.next_u32() as usize % pool,
            };
            acc += v * m.values[index];
            m.cols.push(col);
            m.coefficient_of.push(index as u32);
        }
        m.row_start.push(m.cols.len());
        product.push(acc);
    }
    (m, product)
}

/// The device's sparse products give the host's, zero-padded to the domain;
/// the a·b = c check finds the first row that breaks it, and none in a
/// satisfied system.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn sparse_products_match_the_host_and_the_check_finds_the_first_bad_row() {
    let Some(gpu) = gpu_for_tests() else { return };
    // The second matrix reuses 300 values (2-byte indices); the third has a
    // new value for each of its ~200k other terms (over 65536: 4-byte indices).
    for (rows, inputs, aux, pool, log_n) in
        [(1usize, 1usize, 0usize, 1usize, 0u32), (1000, 3, 700, 300, 10), (100_003, 5, 80_000, 0, 17)]
    {
        let input = random_scalars(inputs, 1);
        let aux_values = random_scalars(aux, 2);
        let (mm, want) = random_matrix(rows, (inputs, aux), pool, rows as u64, &input, &aux_values);
        let m = DeviceMatrix::upload(&gpu, &mm.row_start, &mm.cols, &mm.values, &mm.coefficient_of).unwrap();
        assert!(m.bytes() <= DeviceMatrix::bytes_for(rows, mm.cols.len(), mm.values.len()), "{rows} rows");
        assert_eq!(m.rows(), rows);
        let input_d = gpu.upload(&input).unwrap();
        let aux_d = (aux > 0).then(|| gpu.upload(&aux_values).unwrap());
        let got = m.product(&gpu, &input_d, aux_d.as_ref(), log_n).unwrap().download(&gpu).unwrap();
        assert_eq!(got.len(), 1 << log_n);
        assert!(got[..rows] == want[..], "{rows} rows");
        assert!(got[rows..].iter().all(|v| bool::from(v.is_zero())), "{rows} rows: padding");

        // The matrix's rows checked against a·b without a vector for them:
        // a = 1, b = the product, then b off at two rows.
        let ones = FrBuffer::upload_padded(&gpu, &vec![Scalar::ONE; rows], log_n).unwrap();
        let mut b = want.clone();
        let against = |b: &[Scalar]| {
            let b = FrBuffer::upload_padded(&gpu, b, log_n).unwrap();
            m.unsatisfied(&gpu, &input_d, aux_d.as_ref(), &ones, &b).unwrap().first(&gpu).unwrap()
        };
        assert_eq!(against(&b), None, "{rows} rows: the rows against a·b");
        let off = [rows / 3, rows - 1];
        for &i in off.iter().rev() {
            b[i] += Scalar::ONE;
        }
        assert_eq!(against(&b), Some(off[0]), "{rows} rows: the rows against a·b");

        // c = a·b except at two rows: the first of them is reported.
        let a = random_scalars(rows, 3);
        let b = random_scalars(rows, 4);
        let mut c: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        let up = |v: &[Scalar]| FrBuffer::upload_padded(&gpu, v, log_n).unwrap();
        let check =
            |c: &[Scalar]| Unsatisfied::check(&gpu, &up(&a), &up(&b), &up(c), rows).unwrap().first(&gpu);
        assert_eq!(check(&c).unwrap(), None, "{rows} rows");
        let bad = [rows / 2, rows - 1];
        for &i in bad.iter().rev() {
            c[i] += Scalar::ONE;
        }
        assert_eq!(check(&c).unwrap(), Some(bad[0]), "{rows} rows");
    }
    // a matrix whose rows end past its terms is refused before any copy
    let one = [Scalar::ONE];
    assert!(DeviceMatrix::upload(&gpu, &[0, 2], &[0], &one, &[0]).is_err());
    assert!(
        DeviceMatrix::upload(&gpu, &[0, 2, 1], &[0], &one, &[0]).is_err(),
        "rows that end before they start"
    );
    assert!(DeviceMatrix::upload(&gpu, &[0, 1], &[0], &one, &[1]).is_err(), "an index beyond the values");
    let two = Scalar::ONE.double();
    assert!(
        DeviceMatrix::upload(&gpu, &[0, 1], &[0], &[two], &[0]).is_err(),
        "values that do not start with one"
    );
}

/// Uploads through the two staging slots arrive whole and in order: a
/// vector over several slots and not a multiple of one, then back to back
/// so that the slots are reused while earlier copies may be in flight.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn staged_uploads_round_trip() {
    let Some(gpu) = gpu_for_tests() else { return };
    let per_slot = (8 << 20) / 32;
    let v = random_scalars(3 * per_slot + 17, 11);
    let w = random_scalars(per_slot / 2, 12);
    let (dv, dw) = (gpu.upload_async(&v).unwrap(), gpu.upload_async(&w).unwrap());
    assert!(gpu.download::<Scalar>(&dv).unwrap() == v);
    assert!(gpu.download::<Scalar>(&dw).unwrap() == w);
    assert!(gpu.upload_async::<Scalar>(&[]).is_err(), "an empty upload is refused");
}

/// Two proofs in flight each hold a copy lane: two threads upload on their
/// own lanes at once (through the one staging pair) and every vector
/// arrives whole.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn uploads_on_two_lanes_at_once_round_trip() {
    let Some(gpu) = gpu_for_tests() else { return };
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let gpu = &gpu;
            scope.spawn(move || {
                let lane = gpu.copy_lane().unwrap();
                for round in 0..3 {
                    let v = random_scalars((1 << 19) + 5 * round, 40 + 10 * t + round as u64);
                    let d = lane.upload(&v).unwrap();
                    assert!(gpu.download::<Scalar>(&d).unwrap() == v, "thread {t} round {round}");
                }
            });
        }
    });
}

/// The link's rates come back measured, from both kinds of page-locked
/// memory, whole and chunked (the chunked copy covers the whole buffer,
/// its last chunk short).
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn the_links_rates_are_measured_from_both_kinds_of_page_locked_memory() {
    let Some(gpu) = gpu_for_tests() else { return };
    let r = provd_kernels::link::host_to_device_rates(&gpu, 64 << 20, 5 << 20, 3).unwrap();
    eprintln!("{r:?}");
    for rate in [r.allocated_gbps, r.registered_gbps, r.registered_chunked_gbps] {
        // Between a slow PCIe 3 x4 link and more than any link carries.
        assert!(rate.is_finite() && rate > 0.5 && rate < 1000.0, "{r:?}");
    }
    assert!(provd_kernels::link::host_to_device_rates(&gpu, 0, 1, 1).is_err(), "nothing to copy");
    let odd = vec![7u8; (3 << 20) + 5];
    let rate = provd_kernels::link::registered_rate(&gpu, &odd, Some(1 << 20), 2).unwrap();
    assert!(rate.is_finite() && rate > 0.0, "{rate}");
    assert!(provd_kernels::link::registered_rate(&gpu, &odd, Some(0), 1).is_err(), "chunks of nothing");
}

/// A buffer freed after its stream's last synchronisation stays in the
/// allocator's pool; the free memory a room check reads counts it as free
/// again (without that, a second 32 GiB proof on a 16 GiB card was refused).
/// One buffer on the compute stream, one copied on a lane (a proof's
/// vectors are allocated and freed on its lane), the lane given back.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn freed_buffers_count_as_free_in_a_room_check() {
    let Some(gpu) = gpu_for_tests() else { return };
    let (before, _) = gpu.memory_reclaimed().unwrap();
    let bytes = 2usize << 30;
    // SAFETY: never read; it only takes up room.
    let buf = unsafe { gpu.stream().alloc::<u8>(bytes) }.unwrap();
    let lane = gpu.copy_lane().unwrap();
    let on_lane = lane.upload(&vec![Scalar::ONE; bytes / 32]).unwrap();
    gpu.memory_reclaimed().unwrap();
    let (held, _) = gpu.memory().unwrap();
    assert!(held + bytes <= before, "4 GiB allocated: {before} bytes free before, {held} after");
    drop((buf, on_lane, lane));
    let (pooled, _) = gpu.memory().unwrap();
    let (after, _) = gpu.memory_reclaimed().unwrap();
    eprintln!("free: {before} before, {held} held, {pooled} once dropped, {after} reclaimed");
    // 64 MiB of slack for whatever the driver itself takes meanwhile.
    assert!(after + (64 << 20) >= before, "{before} bytes free before, {after} after freeing and reclaiming");
}

/// A chain's tables made up front, right after the pool is handed back
/// (`prepare_chain`), leave nothing of the pool that a later room check
/// reads as taken beyond the tables themselves; the chain then makes no
/// table of its own. Made mid-chain instead, a small table lands in a
/// vector the chain freed and keeps that vector's block from being handed
/// back: printed, for the record, not asserted (it is the driver's doing).
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn a_chains_tables_made_up_front_leave_nothing_taken_behind_them() {
    let Some(gpu) = gpu_for_tests() else { return };
    let lane = gpu.copy_lane().unwrap();
    let log_n = 22;
    let [a, b, c] = [1u64, 2, 3].map(|s| random_scalars(1 << log_n, 500 + s));
    let chain_once = |ntt: &mut Ntt| {
        let on_coset = |ntt: &mut Ntt, v: &[Scalar]| -> Result<FrBuffer, provd_kernels::GpuError> {
            let mut d = FrBuffer::upload_padded_async(&lane, v, log_n)?;
            ntt.to_coset(HChain::Quotient, &mut d)?;
            Ok(d)
        };
        let mut h = on_coset(ntt, &a).unwrap();
        let b = on_coset(ntt, &b).unwrap();
        ntt.h_from_coset_two_at_a_time(HChain::Quotient, &mut h, b, |ntt| on_coset(ntt, &c)).unwrap();
    };
    for up_front in [false, true] {
        let mut ntt = Ntt::new(gpu.clone());
        let (before, _) = gpu.memory_reclaimed().unwrap();
        if up_front {
            ntt.prepare_chain(HChain::Quotient, log_n).unwrap();
            assert!(ntt.chain_ready(HChain::Quotient, log_n));
            assert!(!ntt.chain_ready(HChain::OddCoset, log_n), "the odd coset's powers are another table");
        }
        let prepared = ntt.kept_bytes(log_n);
        chain_once(&mut ntt);
        let kept = ntt.kept_bytes(log_n);
        let (after, _) = gpu.memory_reclaimed().unwrap();
        let behind = before.saturating_sub(after) as u64;
        let vector = 32u64 << log_n;
        eprintln!(
            "tables made {}: {kept} B kept, {behind} B read as taken after the chain (a vector is {vector} B)",
            if up_front { "up front" } else { "mid-chain" }
        );
        if up_front {
            assert_eq!(kept, prepared, "the chain made a table of its own");
            // 64 MiB of slack for whatever the driver itself takes meanwhile.
            assert!(behind <= kept + (64 << 20), "{behind} B taken behind {kept} B of tables");
        }
        drop(ntt);
        gpu.memory_reclaimed().unwrap();
    }
}
