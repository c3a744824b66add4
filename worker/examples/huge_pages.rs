//! The host's sparse products (how a, b and c are computed where the
//! device has no room for the matrices) over a 3.2 GiB assignment on 4 KiB
//! pages and on huge pages (`groth16::huge_pages`), in one run:
//! `cargo run --release -p provd --example huge_pages`. A synthetic matrix
//! of a PoRep-like shape: 20M rows of 4 terms over 100M aux variables,
//! one coefficient in five not 1. Needs ~7 GiB.

use std::time::Instant;

use blstrs::Scalar;
use ff::Field;
use provd::groth16::huge_pages;
use provd::groth16::sparse::{Column, SparseMatrix};
use rayon::prelude::*;

fn main() {
    let (rows, aux_len, terms) = (20_000_000usize, 100_000_000usize, 4usize);
    let mut state = 88172645463325252u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut m = SparseMatrix::default();
    for _ in 0..rows {
        m.push_row((0..terms).map(|_| {
            let r = next();
            let coefficient = if r % 5 == 0 { Scalar::from(7u64) } else { Scalar::ONE };
            (Column::Aux((r % aux_len as u64) as u32), coefficient)
        }));
    }
    let input = [Scalar::ONE];
    println!("{:>12} {:>8} {:>10} {:>14}", "assignment", "fill s", "product s", "ns a term·core");
    let threads = rayon::current_num_threads() as f64;
    // Twice each, alternated: the allocator's and the kernel's state between.
    for huge in [false, true, false, true] {
        let t = Instant::now();
        let mut aux: Vec<Scalar> =
            if huge { huge_pages::with_capacity(aux_len) } else { Vec::with_capacity(aux_len) };
        aux.par_extend((0..aux_len).into_par_iter().map(|i| Scalar::from(i as u64)));
        let fill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let product = m.product(&input, &aux);
        let secs = t.elapsed().as_secs_f64();
        let per_term = secs * threads / (rows * terms) as f64 * 1e9;
        let pages = if huge { "huge pages" } else { "4 KiB pages" };
        println!("{pages:>12} {fill:>8.2} {secs:>10.2} {per_term:>14.1}");
        std::hint::black_box(product);
    }
}
