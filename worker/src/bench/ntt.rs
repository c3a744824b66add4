//! `provd bench ntt`: GPU NTTs on device-resident data, timed with CUDA events,
//! median of several runs after warm-up.

use std::path::PathBuf;
use std::sync::Arc;

use provd_kernels::{FrBuffer, Gpu, Ntt, Order};
use serde_json::json;

use super::{environment, gpu_median_ms, print_table, random_scalars, write_json};

/// sppark's NTT on the same H200 (device-resident, natural order, median), ms:
/// the goal figures.
const SPPARK_MS: &[(u32, f64)] = &[(20, 0.28), (22, 1.12), (24, 4.73), (26, 23.8)];

pub struct NttBench {
    pub sizes: Vec<u32>,
    pub runs: usize,
    pub warmup: usize,
    pub json: PathBuf,
}

impl NttBench {
    pub fn run(&self, gpu: Arc<Gpu>) -> anyhow::Result<()> {
        let mut ntt = Ntt::new(gpu.clone());
        let timer = gpu.timer()?;
        let mut rows = Vec::new();
        let mut results = Vec::new();
        for &log_n in &self.sizes {
            anyhow::ensure!(
                (1..=provd_kernels::ntt::MAX_LOG_N).contains(&log_n),
                "size 2^{log_n} out of range"
            );
            let n = 1usize << log_n;
            let mut a = FrBuffer::upload(&gpu, &random_scalars(n, 1))?;
            let b = FrBuffer::upload(&gpu, &random_scalars(n, 2))?;
            let c = FrBuffer::upload(&gpu, &random_scalars(n, 3))?;
            ntt.prepare(log_n)?;
            let (warmup, runs) = (self.warmup, self.runs);
            let (dif, _) = gpu_median_ms(
                &timer,
                warmup,
                runs,
                || Ok(()),
                |()| Ok(ntt.forward(&mut a, Order::Natural)?),
            )?;
            let (separate, ()) = gpu_median_ms(
                &timer,
                warmup,
                runs,
                || Ok(()),
                |()| {
                    ntt.forward(&mut a, Order::Natural)?;
                    ntt.bit_reverse(&mut a)?;
                    Ok(())
                },
            )?;
            let (natural, ()) =
                gpu_median_ms(&timer, warmup, runs, || Ok(()), |()| Ok(ntt.forward_natural(&mut a)?))?;
            // The H chain consumes b and c: copy them outside the timed region.
            let copies = || {
                let copies = (b.try_clone(&gpu)?, c.try_clone(&gpu)?);
                gpu.synchronize()?;
                Ok(copies)
            };
            let (h, _) =
                gpu_median_ms(&timer, warmup, runs, copies, |(b2, c2)| Ok(ntt.quotient(&mut a, b2, c2)?))?;
            let sppark = SPPARK_MS.iter().find(|(k, _)| *k == log_n).map(|(_, ms)| *ms);
            let ratio = sppark.map(|s| natural / s);
            rows.push(vec![
                format!("2^{log_n}"),
                format!("{dif:.3}"),
                format!("{separate:.3}"),
                format!("{natural:.3}"),
                format!("{h:.3}"),
                sppark.map(|s| format!("{s:.2}")).unwrap_or_default(),
                ratio.map(|r| format!("{r:.2}")).unwrap_or_default(),
            ]);
            results.push(json!({
                "log_n": log_n, "dif_natural_to_bitrev_ms": dif, "natural_to_natural_ms": natural,
                "dif_then_bit_reversal_ms": separate,
                "h_chain_ms": h, "sppark_ms": sppark, "ratio_natural_vs_sppark": ratio,
            }));
        }
        let info = gpu.info();
        println!(
            "NTT over Fr on {} ({}), device-resident, CUDA events, median of {} after {} warm-up; \
             fwd natural: natural order in and out, the last pass writing bit-reversed \
             (+ reversal pass: a separate bit-reversal kernel instead)",
            info.name, info.arch, self.runs, self.warmup
        );
        print_table(
            &[
                "size",
                "fwd→bitrev ms",
                "+ reversal pass ms",
                "fwd natural ms",
                "H chain ms",
                "sppark ms",
                "natural/sppark",
            ],
            &rows,
        );
        let report = json!({
            "bench": "ntt", "env": environment(), "device": info.name, "arch": info.arch,
            "runs": self.runs, "warmup": self.warmup, "results": results,
        });
        write_json(&self.json, &report)
    }
}
