//! A CPU model of `cuda/field.cuh`'s Montgomery multiplication and squaring:
//! the same carry chains, limb by limb, on u32s, with the constants read out
//! of the kernel source. It checks the algorithm (and the bounds that let the
//! CUDA code drop carries: the model asserts they are zero) against blst on
//! any machine; the GPU tests check the kernels themselves on a device.

use blstrs::Scalar;
use ff::Field;
use provd_kernels::kernel_source;
use rand::{RngCore, SeedableRng};

/// A PTX-style carry chain: one carry flag between consecutive operations.
#[derive(Default)]
struct Chain {
    carry: u64,
}

impl Chain {
    fn add(&mut self, a: u32, b: u32, carry_in: bool) -> u32 {
        let v = a as u64 + b as u64 + if carry_in { self.carry } else { 0 };
        self.carry = v >> 32;
        v as u32
    }
    /// acc + lo(x·y) or hi(x·y), with or without the carry in.
    fn mad(&mut self, x: u32, y: u32, acc: u32, hi: bool, carry_in: bool) -> u32 {
        let p = x as u64 * y as u64;
        let half = if hi { p >> 32 } else { p & 0xffff_ffff };
        let v = half + acc as u64 + if carry_in { self.carry } else { 0 };
        self.carry = v >> 32;
        v as u32
    }
}

struct ModelField {
    n: usize,
    modulus: Vec<u32>,
    inv: u32,
}

impl ModelField {
    /// MOD and INV of `struct <name>` in fields.cuh.
    fn from_source(name: &str) -> Self {
        let src = kernel_source();
        let body = &src[src.find(&format!("struct {name}")).expect("params struct")..];
        let list = &body[body.find("MOD[").unwrap()..];
        let list = &list[list.find('{').unwrap() + 1..list.find('}').unwrap()];
        let modulus: Vec<u32> = list
            .split(',')
            .map(|x| u32::from_str_radix(x.trim().trim_start_matches("0x"), 16).unwrap())
            .collect();
        let inv = &body[body.find("INV = ").unwrap() + 6..];
        let inv = u32::from_str_radix(inv[..inv.find(';').unwrap()].trim_start_matches("0x"), 16).unwrap();
        Self { n: modulus.len(), modulus, inv }
    }

    /// acc[0..n) += x[first + 2t]·y at limbs 2t, 2t+1 (operator*'s mad_row).
    fn mad_row(&self, ch: &mut Chain, acc: &mut [u32], x: &[u32], first: usize, y: u32, carry_in: bool) {
        for t in 0..self.n / 2 {
            let xi = x[first + 2 * t];
            acc[2 * t] = ch.mad(xi, y, acc[2 * t], false, carry_in || t > 0);
            acc[2 * t + 1] = ch.mad(xi, y, acc[2 * t + 1], true, true);
        }
    }

    fn reduce_row(&self, ch: &mut Chain, e: &mut [u32], o: &mut [u32]) {
        let m = e[0].wrapping_mul(self.inv);
        self.mad_row(ch, e, &self.modulus, 0, m, false);
        e[self.n] = ch.add(e[self.n], 0, true);
        self.mad_row(ch, o, &self.modulus, 1, m, false);
        assert_eq!(ch.carry, 0, "odd chain carried out");
    }

    /// shift_limb: O becomes E, E one limb down becomes O; returns E's limb 1.
    fn shift_limb(&self, e: &mut [u32], o: &mut [u32]) -> u32 {
        let n = self.n;
        let between = e[1];
        let (old_e, old_o) = (e.to_vec(), o.to_vec());
        e[..n].copy_from_slice(&old_o);
        e[n] = 0;
        o[..n - 1].copy_from_slice(&old_e[2..=n]);
        o[n - 1] = 0;
        between
    }

    fn finish(&self, ch: &mut Chain, e: &[u32], o: &[u32], hi: Option<&[u32]>) -> Vec<u32> {
        let n = self.n;
        let mut r: Vec<u32> = (0..n).map(|k| ch.add(o[k], e[k + 1], k > 0)).collect();
        assert_eq!(ch.carry, 0);
        if let Some(hi) = hi {
            for k in 0..n {
                r[k] = ch.add(r[k], hi[k], k > 0);
            }
            assert_eq!(ch.carry, 0);
        }
        self.reduce_once(r)
    }

    /// r − p if r ≥ p, else r.
    fn reduce_once(&self, r: Vec<u32>) -> Vec<u32> {
        let mut borrow = 0i64;
        let mut d = vec![0u32; self.n];
        for k in 0..self.n {
            let v = r[k] as i64 - self.modulus[k] as i64 - borrow;
            borrow = (v < 0) as i64;
            d[k] = v as u32;
        }
        if borrow == 0 {
            d
        } else {
            r
        }
    }

    fn mul(&self, a: &[u32], b: &[u32]) -> Vec<u32> {
        let n = self.n;
        let mut ch = Chain::default();
        let (mut e, mut o) = (vec![0u32; n + 1], vec![0u32; n]);
        for t in 0..n / 2 {
            let (pe, po) = (a[2 * t] as u64 * b[0] as u64, a[2 * t + 1] as u64 * b[0] as u64);
            (e[2 * t], e[2 * t + 1]) = (pe as u32, (pe >> 32) as u32);
            (o[2 * t], o[2 * t + 1]) = (po as u32, (po >> 32) as u32);
        }
        self.reduce_row(&mut ch, &mut e, &mut o);
        for &bi in &b[1..n] {
            let between = self.shift_limb(&mut e, &mut o);
            e[0] = ch.add(e[0], between, false);
            self.mad_row(&mut ch, &mut o, a, 1, bi, true);
            assert_eq!(ch.carry, 0, "odd chain carried out");
            self.mad_row(&mut ch, &mut e, a, 0, bi, false);
            e[n] = ch.add(e[n], 0, true);
            self.reduce_row(&mut ch, &mut e, &mut o);
        }
        self.finish(&mut ch, &e, &o, None)
    }

    fn sqr(&self, a: &[u32]) -> Vec<u32> {
        let n = self.n;
        let mut ch = Chain::default();
        let (mut ev, mut od) = (vec![0u32; 2 * n], vec![0u32; 2 * n]);
        for i in 0..n - 1 {
            // i+j even → ev at i+j; odd → od at i+j−1; each row's carry to the next limb
            for (acc, start, off) in [(&mut ev, i + 2, 0usize), (&mut od, i + 1, 1)] {
                let mut last = None;
                for j in (start..n).step_by(2) {
                    let k = i + j - off;
                    acc[k] = ch.mad(a[i], a[j], acc[k], false, last.is_some());
                    acc[k + 1] = ch.mad(a[i], a[j], acc[k + 1], true, true);
                    last = Some(k);
                }
                if let Some(k) = last {
                    if k + 2 < 2 * n - off {
                        acc[k + 2] = ch.add(acc[k + 2], 0, true);
                    } else {
                        assert_eq!(ch.carry, 0);
                    }
                }
            }
        }
        let mut t: Vec<u32> =
            (0..2 * n).map(|k| if k == 0 { ev[0] } else { ch.add(ev[k], od[k - 1], k > 1) }).collect();
        assert_eq!(ch.carry, 0);
        assert_eq!(t[2 * n - 1] >> 29, 0, "the doubling would overflow");
        for k in (1..2 * n).rev() {
            t[k] = (t[k] << 1) | (t[k - 1] >> 31);
        }
        t[0] <<= 1;
        for i in 0..n {
            t[2 * i] = ch.mad(a[i], a[i], t[2 * i], false, i > 0);
            t[2 * i + 1] = ch.mad(a[i], a[i], t[2 * i + 1], true, true);
        }
        assert_eq!(ch.carry, 0);
        let (mut e, mut o) = (t[..n].to_vec(), vec![0u32; n]);
        e.push(0);
        self.reduce_row(&mut ch, &mut e, &mut o);
        for _ in 1..n {
            let between = self.shift_limb(&mut e, &mut o);
            let m = e[0].wrapping_add(between).wrapping_mul(self.inv);
            e[0] = ch.add(e[0], between, false);
            self.mad_row(&mut ch, &mut o, &self.modulus, 1, m, true);
            assert_eq!(ch.carry, 0, "odd chain carried out");
            self.mad_row(&mut ch, &mut e, &self.modulus, 0, m, false);
            e[n] = ch.add(e[n], 0, true);
        }
        self.finish(&mut ch, &e, &o, Some(&t[n..]))
    }
}

fn limbs64(l: &[u64]) -> Vec<u32> {
    l.iter().flat_map(|x| [*x as u32, (*x >> 32) as u32]).collect()
}

#[test]
fn fr_model_matches_blstrs() {
    let f = ModelField::from_source("FrParams");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut values = vec![Scalar::ZERO, Scalar::ONE, -Scalar::ONE, -Scalar::from(2)];
    values.extend((0..2000).map(|_| Scalar::random(&mut rng)));
    let raw = |s: &Scalar| limbs64(&unsafe { std::mem::transmute::<Scalar, [u64; 4]>(*s) });
    for (i, x) in values.iter().enumerate() {
        let y = values[(i * 7 + 1) % values.len()];
        assert_eq!(f.mul(&raw(x), &raw(&y)), raw(&(x * y)), "mul #{i}");
        assert_eq!(f.sqr(&raw(x)), raw(&x.square()), "sqr #{i}");
    }
}

#[test]
fn fp_model_matches_blst() {
    let f = ModelField::from_source("FpParams");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let fp = |bytes: &[u8; 48]| {
        let mut out = blst::blst_fp::default();
        // reduce a random 384-bit string mod p (top bits cleared: below 2^381 < 2p)
        let mut b = *bytes;
        b[0] &= 0x0f;
        unsafe { blst::blst_fp_from_bendian(&mut out, b.as_ptr()) };
        out
    };
    let mut values: Vec<blst::blst_fp> = (0..2000)
        .map(|_| {
            let mut b = [0u8; 48];
            rng.fill_bytes(&mut b);
            fp(&b)
        })
        .collect();
    values.push(blst::blst_fp::default());
    let mut p_minus_1 = blst::blst_fp::default();
    unsafe { blst::blst_fp_cneg(&mut p_minus_1, &values[0], true) };
    values.push(p_minus_1);
    for (i, x) in values.iter().enumerate() {
        let y = values[(i * 7 + 1) % values.len()];
        let (mut xy, mut xx) = (blst::blst_fp::default(), blst::blst_fp::default());
        unsafe {
            blst::blst_fp_mul(&mut xy, x, &y);
            blst::blst_fp_sqr(&mut xx, x);
        }
        assert_eq!(f.mul(&limbs64(&x.l), &limbs64(&y.l)), limbs64(&xy.l), "mul #{i}");
        assert_eq!(f.sqr(&limbs64(&x.l)), limbs64(&xx.l), "sqr #{i}");
    }
}
