//! `provd bench msm`: the GPU G1 MSM with bases resident on the device, plain
//! or with precomputed shifted copies, or streamed from pinned host memory
//! (CUDA events, median after warm-up), beside blst's CPU Pippenger on this host.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use blstrs::{G1Projective, G2Projective};
use group::{Curve, Group};
use provd_kernels::{G1Bases, G2Bases, Gpu, Msm, PinnedBases, Timer};
use rand::SeedableRng;
use rayon::prelude::*;
use serde_json::json;

use super::{environment, gpu_median_ms, median, print_table, random_scalars, write_json};
use crate::groth16::msm::MsmGroup;

/// sppark's G1 MSM on the same H200 (255-bit random scalars, bases and
/// scalars on the device, median), ms: the goal figures.
const SPPARK_MS: &[(u32, f64)] = &[(20, 20.3), (22, 52.2), (24, 154.0), (26, 555.0)];
/// sppark with bases in pinned host memory (the issue gives 2^26 only), ms.
const SPPARK_PINNED_MS: &[(u32, f64)] = &[(26, 607.0)];
/// Points per chunk when bases stream from pinned memory.
const STREAM_CHUNK: usize = 1 << 22;
/// Distinct bases generated; larger sizes repeat them (timing does not depend
/// on the bases being distinct).
const DISTINCT_LOG: u32 = 20;

pub struct MsmBench {
    pub sizes: Vec<u32>,
    pub cpu_sizes: Vec<u32>,
    pub runs: usize,
    pub warmup: usize,
    pub json: PathBuf,
    /// Time the G2 MSM (B's query) instead of G1.
    pub g2: bool,
}

fn random_bases<P>(n: usize) -> Vec<P::AffineRepr>
where
    P: Curve + Send,
    P::AffineRepr: Default + Copy + Send,
{
    let distinct = n.min(1 << DISTINCT_LOG);
    let mut pts: Vec<P::AffineRepr> = (0..distinct.div_ceil(4096))
        .into_par_iter()
        .flat_map_iter(|k| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(k as u64);
            let (mut p, step) = (P::random(&mut rng), P::random(&mut rng));
            let proj: Vec<P> = (0..4096)
                .map(|_| {
                    p += step;
                    p
                })
                .collect();
            let mut aff = vec![P::AffineRepr::default(); proj.len()];
            P::batch_normalize(&proj, &mut aff);
            aff
        })
        .collect();
    pts.truncate(distinct);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let take = (n - out.len()).min(pts.len());
        out.extend_from_slice(&pts[..take]);
    }
    pts.clear();
    out
}

impl MsmBench {
    /// G2: resident bases against blst on this host's cores.
    fn run_g2(&self, gpu: Arc<Gpu>, max: u32) -> anyhow::Result<()> {
        let msm = Msm::new(gpu.clone());
        let timer = gpu.timer()?;
        let all_bases = random_bases::<G2Projective>(1 << max);
        let (mut rows, mut results) = (Vec::new(), Vec::new());
        for &log_n in &self.sizes {
            let n = 1usize << log_n;
            let scalars = random_scalars(n, log_n as u64);
            let bases = G2Bases::upload(&gpu, &all_bases[..n])?;
            let d_scalars = gpu.upload(&scalars)?;
            let (gpu_ms, last) = self.time(&timer, || Ok(msm.run_device(&bases, &d_scalars, n)?))?;
            drop(bases);
            let cpu_ms = if self.cpu_sizes.contains(&log_n) {
                let start = Instant::now();
                let want = G2Projective::pippenger(&all_bases[..n], &scalars);
                anyhow::ensure!(want == last, "GPU and CPU G2 MSMs differ at 2^{log_n}");
                Some(start.elapsed().as_secs_f64() * 1e3)
            } else {
                None
            };
            rows.push(vec![
                format!("2^{log_n}"),
                format!("{gpu_ms:.2}"),
                cpu_ms.map(|c| format!("{c:.1}")).unwrap_or_default(),
                cpu_ms.map(|c| format!("{:.1}", c / gpu_ms)).unwrap_or_default(),
            ]);
            results.push(json!({
                "log_n": log_n, "gpu_resident_ms": gpu_ms, "cpu_blst_ms": cpu_ms,
                "cpu_threads": rayon::current_num_threads(),
            }));
        }
        let info = gpu.info();
        println!(
            "G2 MSM on {} ({}), 255-bit random scalars and bases resident on the device; CUDA events, median of {} after {} warm-up; CPU: blst Pippenger on {} threads, one run",
            info.name, info.arch, self.runs, self.warmup, rayon::current_num_threads()
        );
        print_table(&["size", "gpu ms", "cpu ms", "cpu/gpu"], &rows);
        let report = json!({
            "bench": "msm-g2", "env": environment(), "device": info.name, "arch": info.arch,
            "runs": self.runs, "warmup": self.warmup, "results": results,
        });
        write_json(&self.json, &report)
    }

    /// Median ms of an MSM (CUDA events, after warm-up) and its result.
    fn time<P>(&self, timer: &Timer, mut msm: impl FnMut() -> anyhow::Result<P>) -> anyhow::Result<(f64, P)> {
        gpu_median_ms(timer, self.warmup, self.runs, || Ok(()), |()| msm())
    }

    pub fn run(&self, gpu: Arc<Gpu>) -> anyhow::Result<()> {
        let max = self.sizes.iter().chain(&self.cpu_sizes).copied().max().unwrap_or(0);
        anyhow::ensure!(max <= 28, "sizes above 2^28 are not supported");
        if self.g2 {
            return self.run_g2(gpu, max);
        }
        let msm = Msm::new(gpu.clone());
        let timer = gpu.timer()?;
        let all_bases = random_bases::<G1Projective>(1 << max);
        let mut rows = Vec::new();
        let mut results = Vec::new();
        for &log_n in &self.sizes {
            let n = 1usize << log_n;
            let scalars = random_scalars(n, log_n as u64);
            let bases = G1Bases::upload(&gpu, &all_bases[..n])?;
            let d_scalars = gpu.upload(&scalars)?;
            let (gpu_ms, last) = self.time(&timer, || Ok(msm.run_device(&bases, &d_scalars, n)?))?;
            drop(bases);
            // The same MSM over precomputed shifted copies of the bases.
            let start = Instant::now();
            let shifted = G1Bases::upload_shifted(&gpu, &all_bases[..n])?;
            let precompute_ms = start.elapsed().as_secs_f64() * 1e3;
            let shift_bits = shifted.shift_bits().unwrap_or(0);
            let shifted_gib = shifted.bytes() as f64 / (1u64 << 30) as f64;
            let (shifted_ms, r) = self.time(&timer, || Ok(msm.run_device(&shifted, &d_scalars, n)?))?;
            anyhow::ensure!(r == last, "shifted and plain MSMs differ at 2^{log_n}");
            drop(shifted);
            // The same MSM with the bases streamed from pinned host memory.
            let pinned = PinnedBases::new(&gpu, &all_bases[..n], STREAM_CHUNK)?;
            let (streamed_ms, r) = self.time(&timer, || Ok(msm.run_streamed(&pinned, &d_scalars, n)?))?;
            anyhow::ensure!(r == last, "streamed and resident MSMs differ at 2^{log_n}");
            drop(pinned);
            let sppark_pinned = SPPARK_PINNED_MS.iter().find(|(k, _)| *k == log_n).map(|(_, ms)| *ms);
            let cpu_ms = if self.cpu_sizes.contains(&log_n) {
                let mut t = Vec::new();
                let mut want = G1Projective::identity();
                for _ in 0..3 {
                    let start = Instant::now();
                    want = G1Projective::pippenger(&all_bases[..n], &scalars);
                    t.push(start.elapsed().as_secs_f64() * 1e3);
                }
                anyhow::ensure!(want == last, "GPU and CPU MSMs differ at 2^{log_n}");
                Some(median(&t))
            } else {
                None
            };
            let sppark = SPPARK_MS.iter().find(|(k, _)| *k == log_n).map(|(_, ms)| *ms);
            rows.push(vec![
                format!("2^{log_n}"),
                format!("{gpu_ms:.2}"),
                sppark.map(|s| format!("{s:.1}")).unwrap_or_default(),
                sppark.map(|s| format!("{:.2}", gpu_ms / s)).unwrap_or_default(),
                format!("{shifted_ms:.2}"),
                sppark.map(|s| format!("{:.2}", shifted_ms / s)).unwrap_or_default(),
                format!("{shift_bits}"),
                format!("{shifted_gib:.1}"),
                format!("{:.0}", precompute_ms),
                format!("{streamed_ms:.2}"),
                sppark_pinned.map(|s| format!("{:.2}", streamed_ms / s)).unwrap_or_default(),
                cpu_ms.map(|c| format!("{c:.1}")).unwrap_or_default(),
                cpu_ms.map(|c| format!("{:.1}", c / gpu_ms)).unwrap_or_default(),
            ]);
            results.push(json!({
                "log_n": log_n, "gpu_resident_ms": gpu_ms, "sppark_ms": sppark,
                "gpu_shifted_ms": shifted_ms, "shift_bits": shift_bits, "shifted_table_gib": shifted_gib,
                "shift_precompute_ms": precompute_ms,
                "shifted_ratio_vs_sppark": sppark.map(|s| shifted_ms / s),
                "gpu_streamed_ms": streamed_ms, "stream_chunk": STREAM_CHUNK, "sppark_pinned_ms": sppark_pinned,
                "ratio_vs_sppark": sppark.map(|s| gpu_ms / s), "cpu_blst_ms": cpu_ms,
                "cpu_threads": rayon::current_num_threads(),
            }));
        }
        let info = gpu.info();
        println!(
            "G1 MSM on {} ({}), 255-bit random scalars on the device; bases resident (plain, or with precomputed shifted copies: window c bits, table GiB, precompute ms incl. upload), or streamed from pinned memory in chunks of 2^{}; CUDA events, median of {} after {} warm-up; CPU: blst Pippenger on {} threads, median of 3",
            info.name, info.arch, STREAM_CHUNK.trailing_zeros(), self.runs, self.warmup, rayon::current_num_threads()
        );
        print_table(
            &[
                "size",
                "resident ms",
                "sppark ms",
                "resident/sppark",
                "shifted ms",
                "shifted/sppark",
                "c",
                "table GiB",
                "precompute ms",
                "streamed ms",
                "streamed/sppark",
                "cpu ms",
                "cpu/gpu",
            ],
            &rows,
        );
        let report = json!({
            "bench": "msm", "env": environment(), "device": info.name, "arch": info.arch,
            "runs": self.runs, "warmup": self.warmup, "results": results,
        });
        write_json(&self.json, &report)
    }
}
