//! Radix-2 NTT over Fr on the CPU, parallel with rayon.
//!
//! Used by the CPU backend to compute H = (A·B − C)/Z, and as the reference the
//! GPU kernels are checked against.

use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

use super::error::ProveError;

/// Blocks this small are transformed whole by one thread, so that the first
/// stages run in cache.
const BLOCK_LOG: u32 = 12;

/// An evaluation domain of size 2^k: the k-th roots of unity, their twiddle
/// tables and the coset shift.
#[derive(Clone, Debug)]
pub struct Domain {
    log_n: u32,
    n_inv: Scalar,
    twiddles: Vec<Scalar>,
    inv_twiddles: Vec<Scalar>,
    /// The coset shift g (Fr's multiplicative generator, not a root of unity).
    shift: Scalar,
    shift_inv: Scalar,
    root: TwoAdicRoot,
}

impl Domain {
    /// The smallest domain that holds `constraints` evaluations.
    pub fn for_constraints(constraints: usize, root: TwoAdicRoot) -> Result<Self, ProveError> {
        let log_n = constraints.max(1).next_power_of_two().trailing_zeros();
        if log_n > Scalar::S {
            return Err(ProveError::DomainTooLarge { constraints });
        }
        Ok(Self::on(log_n, root))
    }

    /// The domain of size 2^log_n on bellperson's roots of unity. Panics
    /// above 2^32 (Fr's two-adicity).
    pub fn new(log_n: u32) -> Self {
        Self::on(log_n, TwoAdicRoot::Seven)
    }

    /// The domain of size 2^log_n on the roots of unity of `root`.
    pub fn on(log_n: u32, root: TwoAdicRoot) -> Self {
        let omega = root.of_order(log_n);
        let n = 1usize << log_n;
        let shift = Scalar::MULTIPLICATIVE_GENERATOR;
        Self {
            log_n,
            n_inv: Scalar::from(n as u64).invert().unwrap(),
            twiddles: powers(omega, n / 2),
            inv_twiddles: powers(omega.invert().unwrap(), n / 2),
            shift,
            shift_inv: shift.invert().unwrap(),
            root,
        }
    }

    pub fn log_size(&self) -> u32 {
        self.log_n
    }

    pub fn size(&self) -> usize {
        1 << self.log_n
    }

    /// The coset shift g used by the coset transforms.
    pub fn coset_shift(&self) -> Scalar {
        self.shift
    }

    /// Coefficients → evaluations at ω^i (natural order in and out).
    pub fn fft(&self, v: &mut [Scalar]) {
        self.check(v);
        transform(v, &self.twiddles);
    }

    /// Evaluations at ω^i → coefficients.
    pub fn ifft(&self, v: &mut [Scalar]) {
        self.check(v);
        transform(v, &self.inv_twiddles);
        scale(v, self.n_inv);
    }

    /// Coefficients → evaluations at g·ω^i.
    pub fn coset_fft(&self, v: &mut [Scalar]) {
        self.check(v);
        distribute_powers(v, Scalar::ONE, self.shift);
        transform(v, &self.twiddles);
    }

    /// Evaluations at g·ω^i → coefficients.
    pub fn icoset_fft(&self, v: &mut [Scalar]) {
        self.check(v);
        transform(v, &self.inv_twiddles);
        distribute_powers(v, self.n_inv, self.shift_inv);
    }

    /// Evaluations at ω^i → evaluations at g·ω^i (an ifft and a coset fft, with
    /// the 1/n folded into the coset scaling).
    pub fn to_coset(&self, v: &mut [Scalar]) {
        self.check(v);
        transform(v, &self.inv_twiddles);
        distribute_powers(v, self.n_inv, self.shift);
        transform(v, &self.twiddles);
    }

    /// Evaluations at ω^i → evaluations at the odd 2n-th roots ω₂ₙ·ω^i
    /// (snarkjs's coset, where Z = xⁿ − 1 is −2).
    pub fn to_odd_coset(&self, v: &mut [Scalar]) {
        self.check(v);
        transform(v, &self.inv_twiddles);
        distribute_powers(v, self.n_inv, self.root.of_order(self.log_n + 1));
        transform(v, &self.twiddles);
    }

    /// Coefficients → evaluations at the odd 2n-th roots ω₂ₙ·ω^i.
    #[cfg(test)]
    pub(crate) fn to_odd_coset_from_coefficients(&self, v: &mut [Scalar]) {
        self.check(v);
        distribute_powers(v, Scalar::ONE, self.root.of_order(self.log_n + 1));
        transform(v, &self.twiddles);
    }

    /// 1 / Z(g·ω^i), the same for every i: Z(x) = x^n − 1 and (g·ω^i)^n = g^n.
    pub fn z_inv_on_coset(&self) -> Scalar {
        (self.shift.pow_vartime([self.size() as u64]) - Scalar::ONE).invert().unwrap()
    }

    fn check(&self, v: &[Scalar]) {
        assert_eq!(v.len(), self.size(), "vector length must equal the domain size");
    }
}

/// The primitive 2^log_n-th root of unity (one definition, shared with the GPU NTT).
pub use provd_kernels::ntt::{root_of_unity, TwoAdicRoot};

/// [1, x, x^2, …, x^(len−1)], in parallel chunks.
fn powers(x: Scalar, len: usize) -> Vec<Scalar> {
    let mut out = vec![Scalar::ZERO; len];
    distribute_or_fill(&mut out, Scalar::ONE, x, true);
    out
}

/// `v[i] *= c · x^i`.
pub fn distribute_powers(v: &mut [Scalar], c: Scalar, x: Scalar) {
    distribute_or_fill(v, c, x, false);
}

fn distribute_or_fill(v: &mut [Scalar], c: Scalar, x: Scalar, fill: bool) {
    const CHUNK: usize = 1 << 14;
    v.par_chunks_mut(CHUNK).enumerate().for_each(|(k, chunk)| {
        let mut p = c * x.pow_vartime([(k * CHUNK) as u64]);
        for e in chunk {
            if fill {
                *e = p;
            } else {
                *e *= p;
            }
            p *= x;
        }
    });
}

fn scale(v: &mut [Scalar], c: Scalar) {
    v.par_iter_mut().with_min_len(1 << 12).for_each(|e| *e *= c);
}

/// In-place NTT: bit-reversal, then decimation-in-time butterflies. `tw[j]` is
/// ω^j for j < n/2, so stage of half-size h uses every (n/2h)-th entry.
fn transform(v: &mut [Scalar], tw: &[Scalar]) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    bit_reverse(v);
    let block = n.min(1 << BLOCK_LOG);
    v.par_chunks_mut(block).for_each(|blk| {
        let mut h = 1;
        while h < block {
            let stride = n / (2 * h);
            for group in blk.chunks_exact_mut(2 * h) {
                let (lo, hi) = group.split_at_mut(h);
                butterflies(lo, hi, tw, 0, stride);
            }
            h *= 2;
        }
    });
    let mut h = block;
    while h < n {
        let stride = n / (2 * h);
        // Split each group's butterflies into pieces so that late stages (few,
        // large groups) still spread over every thread.
        let piece = (h / rayon::current_num_threads().max(1)).clamp(1 << 10, h);
        v.par_chunks_mut(2 * h).for_each(|group| {
            let (lo, hi) = group.split_at_mut(h);
            lo.par_chunks_mut(piece)
                .zip(hi.par_chunks_mut(piece))
                .enumerate()
                .for_each(|(p, (l, r))| butterflies(l, r, tw, p * piece, stride));
        });
        h *= 2;
    }
}

#[inline]
fn butterflies(lo: &mut [Scalar], hi: &mut [Scalar], tw: &[Scalar], j0: usize, stride: usize) {
    for (j, (x, y)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
        let t = if j0 + j == 0 { *y } else { *y * tw[(j0 + j) * stride] };
        *y = *x - t;
        *x += t;
    }
}

/// Permutes `v` into bit-reversed index order.
pub fn bit_reverse<T: Send>(v: &mut [T]) {
    let n = v.len();
    let bits = n.trailing_zeros();
    if n <= 2 {
        return;
    }
    let shift = usize::BITS - bits;
    struct Ptr<T>(*mut T);
    unsafe impl<T> Sync for Ptr<T> {}
    unsafe impl<T> Send for Ptr<T> {}
    let p = Ptr(v.as_mut_ptr());
    (0..n).into_par_iter().with_min_len(1 << 12).for_each(|i| {
        let j = i.reverse_bits() >> shift;
        if i < j {
            let p = &p;
            // SAFETY: i < j and i ↦ rev(i) is an involution, so each pair is
            // swapped by exactly one index and no two threads touch one element.
            unsafe { std::ptr::swap(p.0.add(i), p.0.add(j)) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn random(n: usize, seed: u64) -> Vec<Scalar> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| Scalar::random(&mut rng)).collect()
    }

    /// Direct O(n^2) evaluation at `point · ω^i`.
    fn naive_eval(coeffs: &[Scalar], point: Scalar, log_n: u32) -> Vec<Scalar> {
        let omega = root_of_unity(log_n);
        let mut x = point;
        (0..coeffs.len())
            .map(|_| {
                let mut acc = Scalar::ZERO;
                for c in coeffs.iter().rev() {
                    acc = acc * x + c;
                }
                x *= omega;
                acc
            })
            .collect()
    }

    #[test]
    fn fft_matches_naive_evaluation() {
        for log_n in [0, 1, 2, 3, 5, 7] {
            let d = Domain::new(log_n);
            let coeffs = random(d.size(), log_n as u64);
            let mut v = coeffs.clone();
            d.fft(&mut v);
            assert_eq!(v, naive_eval(&coeffs, Scalar::ONE, log_n), "log_n={log_n}");
            let mut w = coeffs.clone();
            d.coset_fft(&mut w);
            assert_eq!(w, naive_eval(&coeffs, d.coset_shift(), log_n), "coset log_n={log_n}");
        }
    }

    #[test]
    fn inverses_round_trip_across_block_sizes() {
        // 2^13 and 2^15 exercise the cross-block stages (BLOCK_LOG = 12).
        for log_n in [4, 12, 13, 15] {
            let d = Domain::new(log_n);
            let orig = random(d.size(), 100 + log_n as u64);
            let mut v = orig.clone();
            d.fft(&mut v);
            d.ifft(&mut v);
            assert_eq!(v, orig);
            d.coset_fft(&mut v);
            d.icoset_fft(&mut v);
            assert_eq!(v, orig);
            let mut via = orig.clone();
            d.to_coset(&mut via);
            let mut direct = orig.clone();
            d.ifft(&mut direct);
            d.coset_fft(&mut direct);
            assert_eq!(via, direct);
        }
    }

    #[test]
    fn large_fft_matches_direct_evaluation() {
        let log_n = 14;
        let d = Domain::new(log_n);
        let coeffs = random(d.size(), 7);
        let mut ours = coeffs.clone();
        d.fft(&mut ours);
        // Past the block size; evaluate a few points directly.
        let omega = root_of_unity(log_n);
        for i in [0usize, 1, 777, d.size() - 1] {
            let x = omega.pow_vartime([i as u64]);
            let mut acc = Scalar::ZERO;
            for c in coeffs.iter().rev() {
                acc = acc * x + c;
            }
            assert_eq!(ours[i], acc, "index {i}");
        }
    }
}
