//! `provd bench porep-shape`: the pieces of proving a PoRep partition at a
//! sector size's real shape, without a sealed sector (a 32 GiB one takes
//! hours to seal): its C1 output drawn at random
//! ([`synthetic`](crate::circuits::filecoin::synthetic)), so nothing proved
//! from it is a proof of anything. Measured, each with its time, the cores
//! it kept busy and its peak RSS:
//!
//! - recording the partition circuit's matrices into a store on disk, and
//!   reading them back (what a restart does);
//! - a partition's witness, challenge by challenge on every core, and the
//!   whole circuit on one thread as storage-proofs runs it, checked to be
//!   the same assignment value for value;
//! - a, b and c by sparse products on the host (what `gpu.products = "cpu"`
//!   does; a GPU worker computes them on its device, and where it has no
//!   room for the matrices, takes a and b alone from the host and makes c
//!   as a·b: [`HostProducts::Ab`]);
//! - with `--prove-runs`, the partition proved on the backend under a
//!   timing key of the circuit's shape, each step's wall and device time,
//!   with a, b and c where the service computes them (`--products`: on the
//!   device by default, from the matrices made resident beside the key, its
//!   a·b = c check run and timed but not enforced, since the witness is
//!   random: [`Products::time_only`]).
//!
//! It prints a sector's seconds projected from these, labelled as projected,
//! with the formula: partitions × the slowest of the host's work (the
//! witness's CPU time, and the products' where the proof computed a, b and
//! c on the host, over the cores; or the witness's wall time over the
//! partitions in synthesis at once) and the device's time. The memory
//! budget, which may admit fewer partitions at once, is not counted. At 512 MiB, where a sector can
//! be sealed here, `provd bench porep --stream` measures the same end to end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use filecoin_proofs_api::RegisteredSealProof;
use serde_json::{json, Value};

use super::{
    current_rss, environment, median, multiples_of_generator, peak_rss, print_table, reset_peak_rss,
    write_json, HostUsage,
};
use crate::backend::{Backend, ProductsPlacement};
use crate::circuits::filecoin::{prover_id_of_miner, Ids, PorepCircuit, WitnessPass};
use crate::groth16::domain::{Domain, TwoAdicRoot};
use crate::groth16::matrix_store::{MatrixStore, Origin};
use crate::groth16::synthesis::{Evaluations, Products};
use crate::groth16::{Blinding, Matrices, ProvingKey, Reduction, StepTime, Synthesized, VerifyingKey};
use crate::groth16::{HostAbc, HostProducts};
use blstrs::{G1Projective, G2Projective};

pub struct PorepShapeBench {
    pub proof: RegisteredSealProof,
    /// Partitions whose witness is computed in parts (the median is reported).
    pub runs: usize,
    /// Holds the matrix store.
    pub work_dir: PathBuf,
    /// Reads the store a previous run left instead of recording afresh.
    pub keep_store: bool,
    /// Also computes the whole circuit's witness on one thread, and checks
    /// that the witness in parts is the same.
    pub whole_witness: bool,
    /// Proofs of the last partition with a timing key (after one
    /// warm-up); 0 to prove none.
    pub prove_runs: usize,
    /// Partitions in synthesis at once in the projected stream.
    pub in_flight: usize,
    /// Then this many sectors through the engine at once
    /// ([`ShapeStream`](super::shape_stream::ShapeStream)); 0 for none.
    pub sectors: usize,
    /// The engine's `partition_permits`: one stream for each, in turn.
    pub permits: Vec<usize>,
    /// The ballast's line where the device was capped (`--device-memory`).
    pub device_cap: Option<String>,
    pub json: PathBuf,
}

/// One measured piece: wall seconds, CPU seconds, and the peak RSS above
/// what the process held before it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Piece {
    wall_s: f64,
    cpu_s: f64,
    cores: f64,
    peak_rss_above_bytes: u64,
}

/// Runs `f`, measuring it as a [`Piece`], which it prints at once (a run
/// cut short still leaves its figures so far).
fn measure<T>(what: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, Piece)> {
    eprintln!("{what}…");
    let before = current_rss();
    reset_peak_rss();
    let usage = HostUsage::now();
    let t = Instant::now();
    let out = f()?;
    let wall_s = t.elapsed().as_secs_f64();
    let cpu_s = usage.zip(HostUsage::now()).map_or(0.0, |(a, b)| b.since(a).cpu_seconds);
    let peak_rss_above_bytes = peak_rss().saturating_sub(before);
    let piece = Piece { wall_s, cpu_s, cores: cpu_s / wall_s.max(1e-9), peak_rss_above_bytes };
    eprintln!("  {what}: {piece:?}");
    Ok((out, piece))
}

fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 30) as f64)
}

/// Bytes of the files directly in `dir`.
fn bytes_in(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

impl PorepShapeBench {
    pub fn run(&self, backends: Vec<Arc<dyn Backend>>) -> anyhow::Result<()> {
        let backend = &*backends[0];
        let circuit = PorepCircuit::new(self.proof).map_err(anyhow::Error::msg)?;
        let store = MatrixStore::new(self.work_dir.join("matrices"));
        if !self.keep_store {
            let _ = std::fs::remove_dir_all(self.work_dir.join("matrices"));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ((matrices, origin), recorded) =
            measure("recording (or reading) the matrices", || Ok(circuit.record_in(&store)?))?;
        let (record_s, first_read_s) = match origin {
            Origin::Recorded { record, read } => (Some(record.as_secs_f64()), read.as_secs_f64()),
            Origin::Loaded { read } => (None, read.as_secs_f64()),
        };
        drop(matrices);
        let ((matrices, _), read) = measure("reading the store", || Ok(circuit.record_in(&store)?))?;
        let matrices = Arc::new(matrices);
        let store_dir = std::fs::read_dir(self.work_dir.join("matrices"))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("meta.json").exists())
            .ok_or_else(|| anyhow::anyhow!("no store was written"))?;
        let on_disk = bytes_in(&store_dir);
        let heap = matrices.heap_bytes() as u64;
        let (constraints, inputs, aux) =
            (matrices.num_constraints(), matrices.num_inputs(), matrices.num_aux());
        eprintln!(
            "{} constraints, {} inputs, {} aux; {} GiB resident, {} GiB on disk",
            matrices.num_constraints(),
            matrices.num_inputs(),
            matrices.num_aux(),
            gib(heap),
            gib(on_disk)
        );
        // Few distinct values over many terms: the table each matrix keeps (one first).
        let coefficients = matrices.coefficient_census();
        for (name, c) in ["A", "B", "C"].iter().zip(&coefficients) {
            eprintln!(
                "{name}: {} terms, {} of coefficient one, {} distinct coefficients",
                c.terms, c.ones, c.distinct
            );
        }

        let ids = Ids { prover_id: prover_id_of_miner(1000), sector_id: 1 };
        let (partitions, drawn) = measure("drawing a synthetic C1", || circuit.synthetic_partitions(ids, 1))?;
        let witness = |k: usize, pass: WitnessPass| {
            let k = k % partitions.len();
            let f = circuit.partition_by(k, partitions[k].clone(), Some(matrices.clone()), pass)?;
            Ok(f()?)
        };
        let mut in_parts = Vec::new();
        let mut last = None;
        for k in 0..self.runs {
            let (w, piece) =
                measure(&format!("partition {k}: witness in parts"), || witness(k, WitnessPass::InParts))?;
            in_parts.push(piece);
            last = Some((k, w));
        }
        let (k, parted) = last.expect("--runs is at least 1");
        let whole = match self.whole_witness {
            true => {
                let (whole, piece) =
                    measure(&format!("partition {k}: the whole circuit's witness on one thread"), || {
                        witness(k, WitnessPass::Whole)
                    })?;
                let same = parted.input_assignment == whole.input_assignment
                    && parted.aux_assignment == whole.aux_assignment;
                anyhow::ensure!(
                    same,
                    "partition {k}: the assignment in parts differs from the whole circuit's"
                );
                Some(piece)
            }
            false => None,
        };
        // Both forms, the one the backend does not take first (dropped at
        // once): a and b alone where it makes c as a·b itself (a GPU's),
        // all three otherwise. The other is the baseline in the same run.
        let host = backend.host_products();
        let other = match host {
            HostProducts::Abc => HostProducts::Ab,
            HostProducts::Ab => HostProducts::Abc,
        };
        let products_as = |form: HostProducts| {
            let what = match form {
                HostProducts::Abc => "a, b and c by sparse products on the host",
                HostProducts::Ab => "a and b by sparse products on the host (c left as a*b)",
            };
            measure(what, || {
                let (input, aux) = (&parted.input_assignment, &parted.aux_assignment);
                // Not checked: the witness is random.
                Ok(match form {
                    HostProducts::Abc => {
                        let [a, b, c] = matrices.products(input, aux);
                        HostAbc { a, b, c: Some(c) }
                    }
                    HostProducts::Ab => {
                        let [a, b] = matrices.products_ab(input, aux);
                        HostAbc { a, b, c: None }
                    }
                })
            })
        };
        let other_products = products_as(other)?.1;
        let (abc, products) = products_as(host)?;
        let assignment_bytes = ((parted.input_assignment.len() + parted.aux_assignment.len()) * 32) as u64;
        let census = ScalarCensus::of(&parted);

        let key = match self.prove_runs > 0 || self.sectors > 0 {
            true => Some(Arc::new(timing_key(&matrices)?)),
            false => None,
        };
        let (steps, abc_on) = match (self.prove_runs, &key) {
            (0, _) | (_, None) => {
                drop((abc, parted)); // not held through a stream
                (Vec::new(), None)
            }
            (runs, Some(key)) => {
                let mut witness = parted;
                // Where the service would compute a, b and c: on a device
                // that computes them, from the matrices made resident beside
                // the key, as time-only products (the random witness fails
                // the check there); else the host's products above.
                let placement = backend.products(key);
                witness.abc = match placement {
                    ProductsPlacement::Gpu => {
                        drop(abc);
                        Evaluations::Products(Products::time_only(matrices.clone()))
                    }
                    ProductsPlacement::Cpu => Evaluations::Host(abc),
                };
                (prove_steps(backend, key, witness, runs)?, Some(placement))
            }
        };
        let pick = |f: fn(&Piece) -> f64| median(&in_parts.iter().map(f).collect::<Vec<_>>());
        let parts = Piece {
            wall_s: pick(|p| p.wall_s),
            cpu_s: pick(|p| p.cpu_s),
            cores: pick(|p| p.cores),
            peak_rss_above_bytes: in_parts.iter().map(|p| p.peak_rss_above_bytes).max().unwrap_or(0),
        };
        let row = |what: &str, p: &Piece, note: String| {
            vec![
                what.to_string(),
                format!("{:.2}", p.wall_s),
                format!("{:.1}", p.cores),
                gib(p.peak_rss_above_bytes),
                note,
            ]
        };
        let mut rows = Vec::new();
        if let Some(s) = record_s {
            rows.push(row(
                "record into the store",
                &recorded,
                format!("{s:.2} s recording, {first_read_s:.2} s reading"),
            ));
        } else {
            rows.push(row("read the kept store", &recorded, "(recorded by an earlier run)".into()));
        }
        rows.push(row(
            "read the store again",
            &read,
            format!("{} GiB on disk, {} GiB resident", gib(on_disk), gib(heap)),
        ));
        rows.push(row("draw the synthetic C1", &drawn, format!("{} partitions", partitions.len())));
        rows.push(row(
            "witness, in parts",
            &parts,
            format!("median of {}; the assignment {} GiB", self.runs, gib(assignment_bytes)),
        ));
        if let Some(whole) = &whole {
            rows.push(row(
                "witness, whole circuit",
                whole,
                format!("{:.1}x the time in parts; the same assignment", whole.wall_s / parts.wall_s),
            ));
        }
        for (form, piece) in [(host, &products), (other, &other_products)] {
            let (what, note) = match form {
                HostProducts::Abc => ("a, b, c on the host", "3 sparse products"),
                HostProducts::Ab => ("a, b on the host", "2 sparse products (c left as a*b)"),
            };
            let whose = if form == host { "; the backend's" } else { "" };
            rows.push(row(what, piece, format!("{note}{whose}")));
        }
        println!("{:?} at its real shape, on {cores} cores (measured in this run):", self.proof);
        print_table(&["piece", "wall s", "cores busy", "peak RSS above GiB", "note"], &rows);

        // Where the device had no room for the matrices, a, b and c were
        // computed on the host's cores after all.
        let products_on_host = steps.iter().any(|s| s.0 == StepTime::PRODUCTS_ON_HOST);
        if let Some(placement) = abc_on {
            let abc = match (placement, products_on_host) {
                (ProductsPlacement::Gpu, false) => {
                    "a, b, c computed on the device (its a*b = c check timed, not enforced)"
                }
                (ProductsPlacement::Gpu, true) => match host {
                    HostProducts::Abc => {
                        "a, b, c computed on the host (the device had no room for the matrices)"
                    }
                    HostProducts::Ab => {
                        "a and b computed on the host, c as a*b (the device had no room for the matrices)"
                    }
                },
                (ProductsPlacement::Cpu, _) => match host {
                    HostProducts::Abc => "a, b, c from the host",
                    HostProducts::Ab => "a and b from the host, c made as a*b",
                },
            };
            println!(
                "{} with a timing key (repeated points: nothing it proves is a proof), {abc}; \
                 medians of {} after a warm-up, device time by CUDA events:",
                backend.name(),
                self.prove_runs
            );
            let rows: Vec<_> = steps
                .iter()
                .map(|(step, wall, device)| {
                    vec![step.to_string(), format!("{wall:.1}"), format!("{device:.1}")]
                })
                .collect();
            print_table(&["step", "wall ms", "device ms"], &rows);
        }
        println!("the MSMs' aux scalars, partition {k} (what their digits and buckets get):");
        print_table(&["MSM", "terms", "zero", "one", "other, < 2^64", "wider"], &census.rows());
        // Projected, and labelled so. In a steady stream the host gives a
        // partition every cpu_s / cores seconds if its witnesses keep every
        // core busy, but no faster than `in_flight` partitions per witness's
        // wall time: a partition's parts keep only some cores busy (2
        // challenges at 512 MiB, 18 at 32 GiB), and only so many are in
        // synthesis at once. A sector is its partitions.
        let in_flight = self.in_flight as f64;
        let per_partition = (parts.cpu_s / cores as f64).max(parts.wall_s / in_flight);
        let sector = per_partition * partitions.len() as f64;
        println!(
            "projected, host witness only (not measured): a sector every {sector:.1} s = {} partitions x \
             max({:.2} CPU s a partition / {cores} cores, {:.2} s a witness / {} in flight)",
            partitions.len(),
            parts.cpu_s,
            parts.wall_s,
            self.in_flight
        );
        // With the device's time a partition: the host's work and the
        // device overlap in a stream, so the slower of the two sets the pace.
        // The host's work is the witness, and a, b and c where the proof
        // computed them there. Not counted: the memory budget, which may
        // admit fewer partitions at once than this needs.
        let device_s =
            steps.iter().find(|s| s.0 == "device, the whole proof").map(|s| s.2 / 1e3).filter(|&d| d > 0.0);
        let host_cpu_s = parts.cpu_s + if products_on_host { products.cpu_s } else { 0.0 };
        let host_s = (host_cpu_s / cores as f64).max(parts.wall_s / in_flight);
        let with_device = device_s.map(|d| partitions.len() as f64 * host_s.max(d));
        if let (Some(d), Some(sector)) = (device_s, with_device) {
            let host = if products_on_host { "host witness and a, b, c" } else { "host witness" };
            println!(
                "projected with the device (not measured; the memory budget not counted): a sector every \
                 {sector:.1} s = {} partitions x max({host_s:.2} s of {host}, {d:.2} s of device time) a partition",
                partitions.len()
            );
        }
        let report: Value = json!({
            "bench": "porep-shape",
            "proof": format!("{:?}", self.proof),
            "env": environment(),
            "device_cap": self.device_cap,
            "cores": cores,
            "constraints": constraints,
            "inputs": inputs,
            "aux": aux,
            "partitions": partitions.len(),
            "matrices": {
                "record_s": record_s,
                "first_read_s": first_read_s,
                "recording": recorded,
                "read": read,
                "bytes_on_disk": on_disk,
                "bytes_resident": heap,
                "coefficients": { "a": coefficients[0], "b": coefficients[1], "c": coefficients[2] },
            },
            "synthetic_c1": drawn,
            "witness_in_parts": { "median": parts, "runs": in_parts },
            "witness_whole": whole,
            "same_assignment": whole.is_some().then_some(true),
            "assignment_bytes": assignment_bytes,
            "aux_scalars": census,
            "host_products": products,
            "host_products_form": format!("{host:?}").to_lowercase(),
            "host_products_other_form": other_products,
            "abc_computed_on": abc_on.map(|p| format!("{p:?}").to_lowercase()),
            "prove_steps": steps.iter().map(|(step, wall_ms, device_ms)| json!({
                "step": step, "wall_ms": wall_ms, "device_ms": device_ms,
            })).collect::<Vec<_>>(),
            "projected_sector_s_host_witness_only": {
                "value": sector,
                "formula": "partitions * max(witness_in_parts.cpu_s / cores, witness_in_parts.wall_s / in_flight)",
                "in_flight": self.in_flight,
            },
            "projected_sector_s_with_device": {
                "value": with_device,
                "formula": "partitions * max((witness_in_parts.cpu_s [+ host_products.cpu_s where the proof \
                            computed a, b, c on the host]) / cores, witness_in_parts.wall_s / in_flight, device seconds \
                            of the whole proof); the memory budget's limit on partitions at once not counted",
                "products_on_host": products_on_host,
            },
        });
        let mut report = report;
        if let (true, Some(key)) = (self.sectors > 0, key) {
            let mut streams = Vec::new();
            for &permits in &self.permits {
                let stream = super::shape_stream::ShapeStream {
                    sectors: self.sectors,
                    permits,
                    circuit: format!("{:?}", self.proof),
                };
                streams.push(stream.run(
                    backends.clone(),
                    &circuit,
                    matrices.clone(),
                    key.clone(),
                    &partitions,
                )?);
                // Each stream's figures on disk as soon as it ends: a later
                // one cut short (or killed for memory) leaves them.
                report["streams"] = Value::Array(streams.clone());
                write_json(&self.json, &report)?;
            }
        }
        write_json(&self.json, &report)
    }
}

/// A proving key of `m`'s shape, its points repeated from a small set: for
/// timing a backend only (the MSMs' work does not depend on the bases'
/// values); nothing proved under it is a proof of anything.
fn timing_key(m: &Matrices) -> anyhow::Result<ProvingKey> {
    use rayon::prelude::*;
    const DISTINCT: usize = 1 << 16;
    let g1 = multiples_of_generator::<G1Projective>(DISTINCT);
    let g2 = multiples_of_generator::<G2Projective>(DISTINCT);
    let fill = |n: usize| (0..n).into_par_iter().map(|i| g1[i % DISTINCT]).collect::<Vec<_>>();
    let n = Domain::for_constraints(m.num_constraints(), TwoAdicRoot::Seven)?.size();
    let [a_aux, b_input, b_aux] = m.densities();
    let b = b_input.ones() + b_aux.ones();
    Ok(ProvingKey {
        pinned: Default::default(),
        vk: VerifyingKey {
            alpha_g1: g1[0],
            beta_g1: g1[1],
            beta_g2: g2[0],
            gamma_g2: g2[1],
            delta_g1: g1[2],
            delta_g2: g2[2],
            ic: fill(m.num_inputs()),
        },
        h: fill(n - 1),
        l: fill(m.num_aux()),
        a: fill(m.num_inputs() + a_aux.ones()),
        b_g1: fill(b),
        b_g2: (0..b).into_par_iter().map(|i| g2[i % DISTINCT]).collect(),
        reduction: Reduction::Bellperson,
    })
}

/// How the aux scalars of the L, A and B MSMs fall: a zero costs an MSM
/// no addition, a one a single addition in one bucket, a small scalar a few
/// windows' digits, a wide one a digit in every window.
#[derive(serde::Serialize)]
struct ScalarCensus {
    l: Tally,
    a: Tally,
    b: Tally,
}

#[derive(Clone, Copy, Default, serde::Serialize)]
struct Tally {
    terms: usize,
    zeros: usize,
    ones: usize,
    below_2_64: usize,
    wider: usize,
}

impl Tally {
    fn of(s: &blstrs::Scalar) -> Self {
        use ff::PrimeField;
        let repr = s.to_repr();
        let bytes = repr.as_ref(); // little-endian
        let small = bytes[8..].iter().all(|&b| b == 0);
        let value = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let mut t = Tally { terms: 1, ..Tally::default() };
        match (small, value) {
            (true, 0) => t.zeros = 1,
            (true, 1) => t.ones = 1,
            (true, _) => t.below_2_64 = 1,
            (false, _) => t.wider = 1,
        }
        t
    }

    fn add(self, o: Self) -> Self {
        Tally {
            terms: self.terms + o.terms,
            zeros: self.zeros + o.zeros,
            ones: self.ones + o.ones,
            below_2_64: self.below_2_64 + o.below_2_64,
            wider: self.wider + o.wider,
        }
    }

    fn row(&self, msm: &str) -> Vec<String> {
        let pct = |n: usize| format!("{n} ({:.1}%)", 100.0 * n as f64 / self.terms.max(1) as f64);
        vec![
            msm.into(),
            self.terms.to_string(),
            pct(self.zeros),
            pct(self.ones),
            pct(self.below_2_64),
            pct(self.wider),
        ]
    }
}

impl ScalarCensus {
    fn of(w: &Synthesized) -> Self {
        use rayon::prelude::*;
        let aux = &w.aux_assignment;
        let tally = |picked: &(dyn Fn(usize) -> bool + Sync)| {
            aux.par_iter()
                .enumerate()
                .filter(|(i, _)| picked(*i))
                .map(|(_, s)| Tally::of(s))
                .reduce(Tally::default, Tally::add)
        };
        Self {
            l: tally(&|_| true),
            a: tally(&|i| w.a_aux_density.get(i)),
            b: tally(&|i| w.b_aux_density.get(i)),
        }
    }

    fn rows(&self) -> Vec<Vec<String>> {
        vec![
            self.l.row("L (every aux)"),
            self.a.row("A (its aux density)"),
            self.b.row("B (its aux density)"),
        ]
    }
}

/// `runs` proofs of `witness` under `key` after a warm-up: each step's
/// median (name, wall ms, device ms), `prove_start`'s then `prove_finish`'s.
fn prove_steps(
    backend: &dyn Backend,
    key: &ProvingKey,
    witness: Synthesized,
    runs: usize,
) -> anyhow::Result<Vec<(String, f64, f64)>> {
    let mut timed: Vec<Vec<StepTime>> = Vec::new();
    for i in 0..=runs {
        eprintln!("proof {i} of {runs} (the first a warm-up) on {}…", backend.name());
        let t = Instant::now();
        let pending = backend.prove_start(key, witness.clone())?;
        let mut steps = pending.steps.clone();
        steps.push(StepTime {
            step: "prove_start",
            wall_ms: t.elapsed().as_secs_f64() * 1e3,
            device_ms: 0.0,
        });
        let device_start = pending.device_seconds.unwrap_or(0.0);
        let t = Instant::now();
        let finished = backend.prove_finish(key, pending, Blinding::random(&mut rand::rngs::OsRng))?;
        steps.extend(finished.steps.iter().copied());
        let device = device_start + finished.device_seconds.unwrap_or(0.0);
        steps.push(StepTime {
            step: "prove_finish",
            wall_ms: t.elapsed().as_secs_f64() * 1e3,
            device_ms: 0.0,
        });
        steps.push(StepTime { step: "device, the whole proof", wall_ms: 0.0, device_ms: device * 1e3 });
        if i > 0 {
            timed.push(steps);
        }
    }
    let first = &timed[0];
    Ok((0..first.len())
        .map(|k| {
            let at = |f: fn(&StepTime) -> f64| median(&timed.iter().map(|r| f(&r[k])).collect::<Vec<_>>());
            (first[k].step.to_string(), at(|s| s.wall_ms), at(|s| s.device_ms))
        })
        .collect())
}
