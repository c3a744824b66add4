//! Multi-scalar multiplications on the CPU, with density filtering.
//!
//! Witnesses of hash-like circuits are mostly bits. Zero scalars are skipped and
//! scalar-one terms are plain point additions; only the rest goes to blst's
//! Pippenger (`multi_exp`, multi-threaded inside blst).

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use group::Group;
use provd_kernels::blst_repr;
use rayon::prelude::*;

use super::density::Density;

/// A group with a Pippenger MSM over its affine points.
pub trait MsmGroup: Group<Scalar = Scalar> + Send + Sync + std::ops::AddAssign<Self::Affine> {
    type Affine: Copy + Send + Sync;
    fn pippenger(bases: &[Self::Affine], scalars: &[Scalar]) -> Self;
}

// Key points go to blst's Pippenger without a copy (`blst_repr`). (blstrs's
// own `multi_exp` takes projective points and normalises them on every call.)

impl MsmGroup for G1Projective {
    type Affine = G1Affine;
    fn pippenger(bases: &[G1Affine], scalars: &[Scalar]) -> Self {
        use blst::MultiPoint;
        blst_repr::g1_from_blst(blst_repr::g1_affine_as_blst(bases).mult(&scalar_bytes(scalars), 255))
    }
}

impl MsmGroup for G2Projective {
    type Affine = G2Affine;
    fn pippenger(bases: &[G2Affine], scalars: &[Scalar]) -> Self {
        use blst::MultiPoint;
        blst_repr::g2_from_blst(blst_repr::g2_affine_as_blst(bases).mult(&scalar_bytes(scalars), 255))
    }
}

/// Canonical little-endian scalar bytes, as blst's Pippenger reads them.
fn scalar_bytes(scalars: &[Scalar]) -> Vec<u8> {
    let mut out = vec![0u8; scalars.len() * 32];
    out.par_chunks_mut(32 * 1024).zip(scalars.par_chunks(1024)).for_each(|(o, s)| {
        for (o, s) in o.chunks_exact_mut(32).zip(s) {
            o.copy_from_slice(&s.to_bytes_le());
        }
    });
    out
}

/// Σ `scalars[i] · bases[i]`; the slices must have equal length.
pub fn msm<G: MsmGroup>(bases: &[G::Affine], scalars: &[Scalar]) -> G {
    assert_eq!(bases.len(), scalars.len(), "MSM needs one scalar per base");
    const CHUNK: usize = 1 << 14;
    // Dense scalars (H's coefficients): gathering the few trivial ones out
    // would copy every base for nothing.
    let trivial = scalars.par_iter().filter(|x| **x == Scalar::ZERO || **x == Scalar::ONE).count();
    if trivial * 4 < scalars.len() {
        return G::pippenger(bases, scalars);
    }
    let parts: Vec<(G, Vec<G::Affine>, Vec<Scalar>)> = bases
        .par_chunks(CHUNK)
        .zip(scalars.par_chunks(CHUNK))
        .map(|(bases, scalars)| {
            let mut ones = G::identity();
            let (mut rest_b, mut rest_s) = (Vec::new(), Vec::new());
            for (p, x) in bases.iter().zip(scalars) {
                if *x == Scalar::ZERO {
                    continue;
                }
                if *x == Scalar::ONE {
                    ones += *p;
                } else {
                    rest_b.push(*p);
                    rest_s.push(*x);
                }
            }
            (ones, rest_b, rest_s)
        })
        .collect();
    let mut acc = G::identity();
    let total: usize = parts.iter().map(|p| p.1.len()).sum();
    let (mut rest_b, mut rest_s) = (Vec::with_capacity(total), Vec::with_capacity(total));
    for (ones, b, s) in parts {
        acc += ones;
        rest_b.extend_from_slice(&b);
        rest_s.extend_from_slice(&s);
    }
    if !rest_b.is_empty() {
        acc += G::pippenger(&rest_b, &rest_s);
    }
    acc
}

/// The scalars of the variables present in `density`, in order.
///
/// In parallel: each task takes a run of the bitmap's words, and its place in
/// the output is the popcount of the words before it. A proof filters the
/// aux assignment three times (A, B on G1, B on G2); one thread at a time
/// this took 195 ms of a 1.17 s bench-22 proof on the H200's host.
pub fn filter(scalars: &[Scalar], density: &Density) -> Vec<Scalar> {
    assert_eq!(scalars.len(), density.len(), "one density bit per scalar");
    /// Variables per task: 2^16, 2 MiB of scalars.
    const WORDS: usize = 1024;
    let words = density.words();
    let counts: Vec<usize> =
        words.par_chunks(WORDS).map(|c| c.iter().map(|w| w.count_ones() as usize).sum()).collect();
    let total: usize = counts.iter().sum();
    debug_assert_eq!(total, density.ones());
    let mut out = Vec::with_capacity(total);
    let mut rest = &mut out.spare_capacity_mut()[..total];
    let mut parts = Vec::with_capacity(counts.len());
    for &n in &counts {
        let (part, tail) = rest.split_at_mut(n);
        parts.push(part);
        rest = tail;
    }
    parts.into_par_iter().zip(words.par_chunks(WORDS)).enumerate().for_each(|(t, (part, chunk))| {
        let mut slots = part.iter_mut();
        for i in super::density::ones_of_words(chunk, t * WORDS * 64) {
            slots.next().expect("a slot per set bit").write(scalars[i]);
        }
        debug_assert!(slots.next().is_none());
    });
    // SAFETY: the parts tile out[..total] and each part has exactly one slot
    // per set bit of its words (its popcount), each written above.
    unsafe { out.set_len(total) };
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn filter_keeps_the_present_scalars_in_order() {
        use super::{filter, Density};
        use blstrs::Scalar;
        // Lengths around the task size (2^16) and word size, sparse and dense.
        for (len, every) in
            [(0, 1), (1, 1), (63, 2), (64, 3), (65, 1), (70_000, 7), (200_001, 1), (131_072, 1000)]
        {
            let scalars: Vec<Scalar> = (0..len as u64).map(Scalar::from).collect();
            let mut d = Density::new(len);
            for i in (0..len).filter(|i| i % every == 0 || i % 13 == 5) {
                d.set(i);
            }
            let want: Vec<Scalar> = (0..len).filter(|&i| d.get(i)).map(|i| scalars[i]).collect();
            assert_eq!(filter(&scalars, &d), want, "len {len}, every {every}");
            assert_eq!(d.iter_ones().collect::<Vec<_>>(), (0..len).filter(|&i| d.get(i)).collect::<Vec<_>>());
        }
    }

    use super::*;
    use rand::SeedableRng;

    #[test]
    fn msm_matches_naive_with_zeros_and_ones() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for n in [0usize, 1, 7, 100, 5_000] {
            let bases: Vec<G1Affine> = (0..n).map(|_| G1Projective::random(&mut rng).into()).collect();
            let scalars: Vec<Scalar> = (0..n)
                .map(|i| match i % 4 {
                    0 => Scalar::ZERO,
                    1 => Scalar::ONE,
                    2 => -Scalar::ONE,
                    _ => Scalar::random(&mut rng),
                })
                .collect();
            let naive = bases.iter().zip(&scalars).fold(G1Projective::identity(), |acc, (p, s)| acc + *p * s);
            assert_eq!(msm::<G1Projective>(&bases, &scalars), naive, "n={n}");
        }
    }
}
