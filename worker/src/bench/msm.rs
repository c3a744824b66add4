//! `provd bench msm`: the GPU G1 MSM with bases resident on the device, plain
//! or with precomputed shifted copies, or streamed from the host's memory (page-locked in place)
//! (CUDA events, median after warm-up), beside blst's CPU Pippenger on this host.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use blstrs::{G1Projective, G2Projective};
use group::Group;
use provd_kernels::{G1Bases, G2Bases, Gpu, HostBases, Msm, Timer, G1};
use serde_json::json;

use super::{
    closed_form, environment, gpu_median_ms, median, multiples_of_generator, print_table, random_scalars,
    witness_scalars, write_json,
};
use crate::groth16::msm::MsmGroup;

/// sppark's G1 MSM on this H200 (255-bit random scalars, bases and scalars
/// on the device, median), ms: **quoted, not measured by this bench**;
/// figures an earlier issue of this project gave as its goal. The table and
/// the JSON say so beside them.
const SPPARK_QUOTED_MS: &[(u32, f64)] = &[(20, 20.3), (22, 52.2), (24, 154.0), (26, 555.0)];
/// The same with bases in pinned host memory (quoted for 2^26 only), ms.
const SPPARK_PINNED_QUOTED_MS: &[(u32, f64)] = &[(26, 607.0)];
/// Where the quoted figures come from, printed with them.
const SPPARK_SOURCE: &str =
    "quoted from an earlier issue's goal figures for this H200, not measured in this run";
/// Points per chunk when bases stream from the host (the prover's chunk too).
const STREAM_CHUNK: usize = 1 << 22;

/// What the scalars of a timed MSM look like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ScalarMix {
    /// Uniform 255-bit scalars (H's quotient coefficients, and peers' figures).
    #[default]
    Random,
    /// A PoRep witness's: 51.4% zero, 47.3% one, 1.3% 255-bit (L, A and B).
    Witness,
}

impl ScalarMix {
    fn scalars(self, n: usize, seed: u64) -> Vec<blstrs::Scalar> {
        match self {
            Self::Random => random_scalars(n, seed),
            Self::Witness => witness_scalars(n, seed),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Random => "255-bit random scalars",
            Self::Witness => "witness-like scalars (51.4% zero, 47.3% one, 1.3% 255-bit)",
        }
    }
}

pub struct MsmBench {
    pub sizes: Vec<u32>,
    pub cpu_sizes: Vec<u32>,
    pub runs: usize,
    pub warmup: usize,
    pub json: PathBuf,
    /// Time the G2 MSM (B's query) instead of G1.
    pub g2: bool,
    pub scalars: ScalarMix,
    /// Bytes of freed device memory the allocator's pool keeps mapped
    /// across synchronisations ([`Gpu::keep_freed_memory`]); `None` leaves
    /// the provd default.
    pub keep_freed: Option<u64>,
}

impl MsmBench {
    /// G2: resident bases against blst on this host's cores.
    fn run_g2(&self, gpu: Arc<Gpu>, max: u32) -> anyhow::Result<()> {
        let msm = Msm::new(gpu.clone());
        let timer = gpu.timer()?;
        let all_bases = multiples_of_generator::<G2Projective>(1 << max);
        let (mut rows, mut results) = (Vec::new(), Vec::new());
        for &log_n in &self.sizes {
            let n = 1usize << log_n;
            let scalars = self.scalars.scalars(n, log_n as u64);
            let bases = G2Bases::upload(&gpu, &all_bases[..n])?;
            let d_scalars = gpu.upload(&scalars)?;
            let (gpu_ms, last) = self.time(&timer, || Ok(msm.run_device(&bases, &d_scalars, n)?))?;
            drop(bases);
            anyhow::ensure!(
                last == closed_form::<G2Projective>(&scalars),
                "the G2 MSM at 2^{log_n} is not Σ s_i·(i+1)·G"
            );
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
            "G2 MSM on {} ({}), {} and bases resident on the device; CUDA events, median of {} after {} warm-up; CPU: blst Pippenger on {} threads, one run",
            info.name, info.arch, self.scalars.describe(), self.runs, self.warmup, rayon::current_num_threads()
        );
        print_table(&["size", "gpu ms", "cpu ms", "cpu/gpu"], &rows);
        let report = json!({
            "bench": "msm-g2", "env": environment(), "device": info.name, "arch": info.arch,
            "runs": self.runs, "warmup": self.warmup, "results": results,
            "scalars": self.scalars.describe(), "keep_freed_bytes": self.keep_freed,
        });
        write_json(&self.json, &report)
    }

    fn keep_freed_label(&self) -> String {
        match self.keep_freed {
            Some(b) => format!("up to {b} bytes"),
            None => "provd's default".into(),
        }
    }

    /// Median ms of an MSM (CUDA events, after warm-up) and its result.
    fn time<P>(&self, timer: &Timer, mut msm: impl FnMut() -> anyhow::Result<P>) -> anyhow::Result<(f64, P)> {
        gpu_median_ms(timer, self.warmup, self.runs, || Ok(()), |()| msm())
    }

    pub fn run(&self, gpu: Arc<Gpu>) -> anyhow::Result<()> {
        if let Some(bytes) = self.keep_freed {
            gpu.keep_freed_memory(bytes)?;
        }
        let max = self.sizes.iter().chain(&self.cpu_sizes).copied().max().unwrap_or(0);
        anyhow::ensure!(max <= 28, "sizes above 2^28 are not supported");
        if self.g2 {
            return self.run_g2(gpu, max);
        }
        let msm = Msm::new(gpu.clone());
        let timer = gpu.timer()?;
        let all_bases = multiples_of_generator::<G1Projective>(1 << max);
        let mut rows = Vec::new();
        let mut results = Vec::new();
        for &log_n in &self.sizes {
            let n = 1usize << log_n;
            let scalars = self.scalars.scalars(n, log_n as u64);
            let bases = G1Bases::upload(&gpu, &all_bases[..n])?;
            let d_scalars = gpu.upload(&scalars)?;
            let (gpu_ms, last) = self.time(&timer, || Ok(msm.run_device(&bases, &d_scalars, n)?))?;
            drop(bases);
            anyhow::ensure!(
                last == closed_form::<G1Projective>(&scalars),
                "the MSM at 2^{log_n} is not Σ s_i·(i+1)·G"
            );
            // The same MSM over precomputed shifted copies of the bases, where
            // the device has room for them and the MSM's scratch (a failure
            // here is reported, and the other layouts still run).
            let shifted = (|| -> anyhow::Result<_> {
                let start = Instant::now();
                let shifted = G1Bases::upload_shifted(&gpu, &all_bases[..n])?;
                let precompute_ms = start.elapsed().as_secs_f64() * 1e3;
                let shift_bits = shifted.shift_bits().unwrap_or(0);
                let shifted_gib = shifted.bytes() as f64 / (1u64 << 30) as f64;
                let (shifted_ms, r) = self.time(&timer, || Ok(msm.run_device(&shifted, &d_scalars, n)?))?;
                anyhow::ensure!(r == last, "shifted and plain MSMs differ at 2^{log_n}");
                Ok((shifted_ms, shift_bits, shifted_gib, precompute_ms))
            })();
            let (shifted_ms, shift_bits, shifted_gib, precompute_ms) = match shifted {
                Ok((ms, bits, gib, pre)) => (Some(ms), Some(bits), Some(gib), Some(pre)),
                Err(e) => {
                    eprintln!("2^{log_n}, shifted bases: {e:#}");
                    (None, None, None, None)
                }
            };
            // The same MSM with the bases streamed from the host's memory, page-locked in place.
            // SAFETY: `all_bases` outlives `host` and is not written meanwhile.
            let host = unsafe { HostBases::<G1>::register(&gpu, &all_bases[..n]) }?;
            let (streamed_ms, r) =
                self.time(&timer, || Ok(msm.run_streamed(host.view(..), STREAM_CHUNK, &d_scalars, n)?))?;
            anyhow::ensure!(r == last, "streamed and resident MSMs differ at 2^{log_n}");
            drop(host);
            // sppark's quoted figures are for random scalars only.
            let quoted = |table: &[(u32, f64)]| {
                let random = self.scalars == ScalarMix::Random;
                table.iter().find(|(k, _)| random && *k == log_n).map(|(_, ms)| *ms)
            };
            let sppark_pinned = quoted(SPPARK_PINNED_QUOTED_MS);
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
            let sppark = quoted(SPPARK_QUOTED_MS);
            rows.push(vec![
                format!("2^{log_n}"),
                format!("{gpu_ms:.2}"),
                sppark.map(|s| format!("{s:.1}")).unwrap_or_default(),
                sppark.map(|s| format!("{:.2}", gpu_ms / s)).unwrap_or_default(),
                shifted_ms.map_or("did not fit".into(), |ms| format!("{ms:.2}")),
                sppark.zip(shifted_ms).map(|(s, ms)| format!("{:.2}", ms / s)).unwrap_or_default(),
                shift_bits.map(|b| b.to_string()).unwrap_or_default(),
                shifted_gib.map(|g| format!("{g:.1}")).unwrap_or_default(),
                precompute_ms.map(|p| format!("{p:.0}")).unwrap_or_default(),
                format!("{streamed_ms:.2}"),
                sppark_pinned.map(|s| format!("{:.2}", streamed_ms / s)).unwrap_or_default(),
                cpu_ms.map(|c| format!("{c:.1}")).unwrap_or_default(),
                cpu_ms.map(|c| format!("{:.1}", c / gpu_ms)).unwrap_or_default(),
            ]);
            results.push(json!({
                "log_n": log_n, "gpu_resident_ms": gpu_ms, "sppark_ms": sppark,
                "gpu_shifted_ms": shifted_ms, "shift_bits": shift_bits, "shifted_table_gib": shifted_gib,
                "shift_precompute_ms": precompute_ms,
                "shifted_ratio_vs_sppark": sppark.zip(shifted_ms).map(|(s, ms)| ms / s),
                "gpu_streamed_ms": streamed_ms, "stream_chunk": STREAM_CHUNK, "sppark_pinned_ms": sppark_pinned,
                "ratio_vs_sppark": sppark.map(|s| gpu_ms / s), "sppark_source": SPPARK_SOURCE,
                "checked_against": "closed form: bases (i+1)G, so the MSM is (sum s_i (i+1)) G",
                "cpu_blst_ms": cpu_ms,
                "cpu_threads": rayon::current_num_threads(),
            }));
        }
        let info = gpu.info();
        println!(
            "G1 MSM on {} ({}), {} on the device; freed memory kept by the pool: {}; bases resident (plain, or with precomputed shifted copies: window c bits, table GiB, precompute ms incl. upload), or streamed from the host's memory (page-locked in place) in chunks of 2^{}; CUDA events, median of {} after {} warm-up; CPU: blst Pippenger on {} threads, median of 3",
            info.name, info.arch, self.scalars.describe(), self.keep_freed_label(), STREAM_CHUNK.trailing_zeros(), self.runs, self.warmup, rayon::current_num_threads()
        );
        println!("bases (i+1)·G: every result checked against Σ s_i·(i+1)·G; sppark: {SPPARK_SOURCE}");
        print_table(
            &[
                "size",
                "resident ms",
                "sppark ms (quoted)",
                "resident/sppark",
                "shifted ms",
                "shifted/sppark",
                "c",
                "table GiB",
                "precompute ms",
                "streamed ms",
                "streamed/sppark (quoted)",
                "cpu ms",
                "cpu/gpu",
            ],
            &rows,
        );
        let report = json!({
            "bench": "msm", "env": environment(), "device": info.name, "arch": info.arch,
            "runs": self.runs, "warmup": self.warmup, "results": results,
            "scalars": self.scalars.describe(), "keep_freed_bytes": self.keep_freed,
        });
        write_json(&self.json, &report)
    }
}
