//! Benchmarks behind `provd bench ...`: each prints a table and writes JSON
//! with the machine and commit it ran on.

pub mod ballast;
pub mod circom;
#[cfg(feature = "grpc")]
pub mod doors;
#[cfg(feature = "filecoin")]
pub mod filecoin;
pub mod lane;
pub mod link;
pub mod msm;
pub mod ntt;
pub mod pipeline;
#[cfg(feature = "filecoin")]
pub mod porep;
#[cfg(feature = "filecoin")]
pub mod porep_shape;
pub mod prove;
#[cfg(feature = "filecoin")]
pub mod shape_stream;
#[cfg(feature = "filecoin")]
pub mod sizes;
#[cfg(feature = "filecoin")]
pub mod vanilla;

use std::path::Path;
use std::time::Duration;

use rayon::prelude::*;
use serde_json::{json, Value};

/// n random field elements, generated in parallel from `seed`.
pub fn random_scalars(n: usize, seed: u64) -> Vec<blstrs::Scalar> {
    use ff::Field;
    use rand::SeedableRng;
    use rayon::prelude::*;
    let mut v = vec![blstrs::Scalar::ZERO; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(i, c)| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (i as u64) << 20);
        c.iter_mut().for_each(|x| *x = blstrs::Scalar::random(&mut rng));
    });
    v
}

/// n scalars split as a 32 GiB PoRep partition's witness MSMs are (L's aux
/// scalars, counted by `provd bench porep-shape`): 51.4% zero, 47.3% one,
/// 1.3% random 255-bit; generated in parallel from `seed`.
pub fn witness_scalars(n: usize, seed: u64) -> Vec<blstrs::Scalar> {
    use ff::Field;
    use rand::{Rng, SeedableRng};
    use rayon::prelude::*;
    let mut v = vec![blstrs::Scalar::ZERO; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(i, c)| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (i as u64) << 20);
        for x in c.iter_mut() {
            *x = match rng.gen_range(0..1000) {
                0..514 => blstrs::Scalar::ZERO,
                514..987 => blstrs::Scalar::ONE,
                _ => blstrs::Scalar::random(&mut rng),
            };
        }
    });
    v
}

/// The bases (i+1)·G for i < n, G the group's generator: an MSM over them
/// has a closed form, Σ s_i·(i+1) · G, computed on the host independently
/// of any MSM code, which checks every size (2^24 and up too, where blst
/// would take too long). Timing does not depend on the bases' values.
pub fn multiples_of_generator<P>(n: usize) -> Vec<P::AffineRepr>
where
    P: group::Curve + group::Group<Scalar = blstrs::Scalar> + Send,
    P::AffineRepr: Default + Copy + Send,
{
    const CHUNK: usize = 4096;
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .flat_map_iter(|k| {
            let g = P::generator();
            let mut p = g * blstrs::Scalar::from((k * CHUNK) as u64 + 1);
            let proj: Vec<P> = (0..CHUNK.min(n - k * CHUNK))
                .map(|_| {
                    let here = p;
                    p += g;
                    here
                })
                .collect();
            let mut aff = vec![P::AffineRepr::default(); proj.len()];
            P::batch_normalize(&proj, &mut aff);
            aff
        })
        .collect()
}

/// Σ s_i·(i+1) · G: the MSM of `scalars` over [`multiples_of_generator`].
pub fn closed_form<P: group::Group<Scalar = blstrs::Scalar>>(scalars: &[blstrs::Scalar]) -> P {
    let sum = scalars
        .par_iter()
        .enumerate()
        .map(|(i, s)| *s * blstrs::Scalar::from(i as u64 + 1))
        .reduce(|| blstrs::Scalar::from(0u64), |a, b| a + b);
    P::generator() * sum
}

/// Median of a set of timings (upper median for even counts).
pub fn median<T: Copy + PartialOrd>(samples: &[T]) -> T {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("timings are not NaN"));
    s[s.len() / 2]
}

/// Runs `setup` then `run` `warmup + runs` times, timing only `run` with CUDA
/// events; returns the median of the timed runs in ms and the last result.
pub fn gpu_median_ms<S, R>(
    timer: &provd_kernels::Timer,
    warmup: usize,
    runs: usize,
    mut setup: impl FnMut() -> anyhow::Result<S>,
    mut run: impl FnMut(S) -> anyhow::Result<R>,
) -> anyhow::Result<(f64, R)> {
    let mut samples = Vec::with_capacity(runs);
    let mut last = None;
    for i in 0..warmup + runs.max(1) {
        let input = setup()?;
        timer.start()?;
        last = Some(run(input)?);
        let ms = timer.stop()? as f64;
        if i >= warmup {
            samples.push(ms);
        }
    }
    Ok((median(&samples), last.expect("at least one run")))
}

/// What machine and build a result came from.
pub fn environment() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    json!({
        "commit": crate::telemetry::metrics::COMMIT,
        "cpu": cpu,
        "threads": rayon::current_num_threads(),
        "os": std::env::consts::OS,
    })
}

/// Writes `report` as pretty JSON, creating parent directories.
pub fn write_json(path: &Path, report: &Value) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Prints rows as an aligned table with a header.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells.iter().zip(&width).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ")
    };
    println!("{}", line(header.to_vec()));
    for r in rows {
        println!("{}", line(r.iter().map(String::as_str).collect()));
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// What the whole process has used of the host so far (`getrusage`: every
/// thread's, ended ones included): CPU time, and page faults and context
/// switches, which say whether a stream's host threads wait on the kernel
/// (faulting in fresh buffers, contending for the memory map, preempted)
/// rather than compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostUsage {
    /// User and system time.
    pub cpu_seconds: f64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl HostUsage {
    pub fn now() -> Option<Self> {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is valid.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: zeroed, then written by a successful getrusage.
        let u = unsafe { usage.assume_init() };
        let n = |v: libc::c_long| u64::try_from(v).unwrap_or(0);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Some(Self {
            cpu_seconds: secs(u.ru_utime) + secs(u.ru_stime),
            minor_faults: n(u.ru_minflt),
            major_faults: n(u.ru_majflt),
            voluntary_switches: n(u.ru_nvcsw),
            involuntary_switches: n(u.ru_nivcsw),
        })
    }

    /// What was used between `before` and `self`.
    pub fn since(self, before: Self) -> Self {
        Self {
            cpu_seconds: self.cpu_seconds - before.cpu_seconds,
            minor_faults: self.minor_faults.saturating_sub(before.minor_faults),
            major_faults: self.major_faults.saturating_sub(before.major_faults),
            voluntary_switches: self.voluntary_switches.saturating_sub(before.voluntary_switches),
            involuntary_switches: self.involuntary_switches.saturating_sub(before.involuntary_switches),
        }
    }
}

/// Peak resident memory since the last reset (`VmHWM`), in bytes.
pub fn peak_rss() -> u64 {
    status_bytes("VmHWM:")
}

/// Resident memory now (`VmRSS`), in bytes.
pub fn current_rss() -> u64 {
    status_bytes("VmRSS:")
}

/// A field of `/proc/self/status` given in kB, in bytes (0 where unreadable).
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Starts a new peak-RSS window (Linux: writing 5 to `clear_refs`).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groth16::msm::MsmGroup;
    use blstrs::{G1Projective, G2Projective};
    use group::Group;

    /// Spinning shows as CPU time (within a deadline), touching fresh memory
    /// as page faults, a sleep as a voluntary context switch.
    #[test]
    fn host_usage_counts_cpu_time_faults_and_switches() {
        let before = HostUsage::now().expect("getrusage works on Linux");
        // Spin until 50 ms of CPU time show (a loaded machine may take longer).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 1u64;
        while HostUsage::now().unwrap().since(before).cpu_seconds < 0.05 {
            assert!(
                std::time::Instant::now() < deadline,
                "10 s of spinning never showed as 50 ms of CPU time"
            );
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let mut fresh = vec![0u8; 64 << 20];
        for page in fresh.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&fresh);
        std::thread::sleep(std::time::Duration::from_millis(5));
        let d = HostUsage::now().unwrap().since(before);
        assert!(d.minor_faults > 0, "{d:?}");
        assert!(d.voluntary_switches > 0, "a sleep gives up the core: {d:?}");
    }

    /// The closed form is blst's MSM over the multiples, on both groups and
    /// across a chunk boundary; a wrong scalar breaks it.
    #[test]
    fn the_closed_form_is_the_msm_over_multiples_of_the_generator() {
        let n = 5000;
        let scalars = random_scalars(n, 3);
        let g1 = multiples_of_generator::<G1Projective>(n);
        assert_eq!(g1.len(), n);
        assert_eq!(G1Projective::from(g1[2]), G1Projective::generator() * blstrs::Scalar::from(3u64));
        assert_eq!(G1Projective::pippenger(&g1, &scalars), closed_form::<G1Projective>(&scalars));
        let g2 = multiples_of_generator::<G2Projective>(n);
        assert_eq!(G2Projective::pippenger(&g2, &scalars), closed_form::<G2Projective>(&scalars));
        let mut wrong = scalars.clone();
        wrong[4321] += blstrs::Scalar::from(1u64);
        assert_ne!(G1Projective::pippenger(&g1, &wrong), closed_form::<G1Projective>(&scalars));
    }
}
