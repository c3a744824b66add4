//! Benchmarks behind `provd bench ...`: each prints a table and writes JSON
//! with the machine and commit it ran on.

pub mod circom;
pub mod msm;
pub mod ntt;
pub mod pipeline;
#[cfg(feature = "filecoin")]
pub mod porep;
pub mod prove;

use std::path::Path;
use std::time::Duration;

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
