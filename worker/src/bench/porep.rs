//! `provd bench porep`: Filecoin PoRep C2 of one sealed sector, through
//! provd's engine (its gauges, budget and backend), against filecoin-proofs'
//! own `seal_commit_phase2` on the same C1 output and parameters, in one run.
//!
//! The sector is sealed here once (PC1, PC2, C1) and its TEST-ONLY
//! parameters generated once, both kept in the work directory for the next
//! run. Every proof, provd's and filecoin-proofs', passes `verify_seal`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use filecoin_proofs_api::RegisteredSealProof;
use serde_json::json;

use super::filecoin::{device_busy_seconds, job_proof, job_spec, prove_job};
use super::{environment, median, peak_rss, print_table, reset_peak_rss, write_json};
use crate::backend::Backend;
use crate::circuits::filecoin::seal::{kept_sector, SealedSector};
use crate::circuits::filecoin::{prover_id_of_miner, FilecoinPorepConfig, FilecoinPorepKind, Ids, Synthesis};
use crate::circuits::CircuitKind;
use crate::pipeline::{Engine, PipelineConfig, Priority};
use crate::telemetry::Metrics;

pub struct PorepBench {
    pub proof: RegisteredSealProof,
    pub runs: usize,
    /// Holds the sealed sector, the parameter cache and the parent cache.
    pub work_dir: PathBuf,
    /// Time filecoin-proofs' own C2 (its CPU prover) beside provd's.
    pub vs_filecoin_proofs: bool,
    pub synthesis: Synthesis,
    /// Sectors submitted at once after the timed runs (0 or 1: none): the
    /// steady stream's seconds a sector, measured end to end.
    pub stream: usize,
    /// The ballast's line where the device was capped (`--device-memory`).
    pub device_cap: Option<String>,
    pub json: PathBuf,
}

/// How one backend held the sector's key and where it computed a, b and
/// c, after the runs (under a small enough cap: the key "streamed").
#[derive(serde::Serialize)]
struct Placement {
    device: String,
    key: &'static str,
    products: &'static str,
}

impl Placement {
    fn of(backend: &dyn Backend, key: &crate::groth16::ProvingKey) -> Self {
        let fp = key.fingerprint();
        let layout = backend.resident_keys().keys.iter().find(|k| k.fingerprint == fp).and_then(|k| k.layout);
        Placement {
            device: backend.name().to_string(),
            key: layout.map_or("not on a device", |l| l.name()),
            products: match backend.products(key) {
                crate::backend::ProductsPlacement::Gpu => "device",
                crate::backend::ProductsPlacement::Cpu => "host",
            },
        }
    }
}

/// A stream of sectors submitted at once: when each ended.
struct Stream {
    sectors: usize,
    /// Seconds from the submission to each job's end, in the order they ended.
    ends: Vec<f64>,
    /// Device busy seconds between the first end and the last.
    busy_between: f64,
}

impl Stream {
    /// Seconds a sector in the steady stream: between the first sector's end
    /// and the last's, (sectors − 1) ended (the first one's pipeline fill is
    /// left out).
    fn seconds_per_sector(&self) -> f64 {
        (self.ends[self.ends.len() - 1] - self.ends[0]) / (self.sectors - 1) as f64
    }

    /// The device's measured busy share of the same interval.
    fn gpu_busy(&self) -> f64 {
        self.busy_between / (self.ends[self.ends.len() - 1] - self.ends[0])
    }
}

impl PorepBench {
    /// The sector of this run: sealed before (and kept), or sealed now.
    fn sector(&self) -> anyhow::Result<SealedSector> {
        let dir = self.work_dir.join(format!("sector-{:?}", self.proof));
        kept_sector(self.proof, Ids { prover_id: prover_id_of_miner(1000), sector_id: 1 }, &dir)
    }

    pub fn run(&self, backends: Vec<Arc<dyn Backend>>) -> anyhow::Result<()> {
        let params = self.work_dir.join("params");
        // filecoin-proofs reads these once, when first used.
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &params);
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", self.work_dir.join("parents"));
        let t = Instant::now();
        let sector = self.sector()?;
        let sealed = t.elapsed();
        eprintln!(
            "sector {:?}: PC1 {:.1} s, PC2 {:.1} s, C1 {:.1} s (sealed earlier if ~0; this run {:.1} s)",
            self.proof,
            sector.times[0].as_secs_f64(),
            sector.times[1].as_secs_f64(),
            sector.times[2].as_secs_f64(),
            sealed.as_secs_f64()
        );
        let t = Instant::now();
        let config = FilecoinPorepConfig {
            name: format!("{:?}", self.proof),
            proof: self.proof,
            parameter_cache: Some(params),
            test_only_parameters: true,
            synthesis: self.synthesis,
            matrices_cache: None,
            priority: None,
        };
        let kind = FilecoinPorepKind::load(&config)?;
        let loaded = t.elapsed();
        let key = kind.key().clone();
        eprintln!(
            "{} constraints, {} partitions; parameters (and with synthesis {:?}, the recorded matrices) ready in \
             {:.1} s ({} MiB resident, key {} MiB)",
            kind.constraints(),
            self.proof.partitions(),
            self.synthesis,
            loaded.as_secs_f64(),
            kind.resident_bytes() >> 20,
            key.resident_bytes() >> 20
        );

        let metrics = Arc::new(Metrics::new());
        let engine = Engine::start(PipelineConfig::default(), backends.clone(), metrics.clone())?;
        let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
        let rss_before = crate::telemetry::memory::rss_bytes();
        let (mut ours, mut device, mut synthesis) = (Vec::new(), Vec::new(), Vec::new());
        let (mut peak_buffers, mut peak_reserved) = (0i64, 0i64);
        reset_peak_rss();
        // One warm-up, then `runs` timed sectors.
        for run in 0..=self.runs {
            let job = prove_job(&engine, &names, &kind, &config.name, sector.input())?;
            anyhow::ensure!(sector.verify(&job.proof)?, "provd's sector proof fails verify_seal");
            peak_buffers = peak_buffers.max(job.peak_buffer_bytes);
            peak_reserved = peak_reserved.max(job.peak_reserved_bytes);
            if run > 0 {
                ours.push(job.elapsed);
                device.push(job.device_seconds);
                synthesis.push(job.synthesis_seconds);
            }
        }
        let provd_peak_rss = peak_rss();
        let stream = if self.stream > 1 {
            Some(self.stream_sectors(&engine, &names, &kind, &config.name, &sector)?)
        } else {
            None
        };
        let estimate = engine.admission_bytes(kind.key(), kind.abc_from());
        drop(engine);
        let placed: Vec<Placement> = backends.iter().map(|b| Placement::of(b.as_ref(), &key)).collect();

        let mut theirs = Vec::new();
        let mut theirs_peak_rss = 0;
        if self.vs_filecoin_proofs {
            reset_peak_rss();
            for run in 0..=self.runs {
                let c1 = sector.c1()?;
                let t = Instant::now();
                let out = filecoin_proofs_api::seal::seal_commit_phase2(
                    c1,
                    sector.ids.prover_id,
                    filecoin_proofs_api::SectorId::from(sector.ids.sector_id),
                )
                .context("filecoin-proofs' seal_commit_phase2")?;
                let elapsed = t.elapsed();
                anyhow::ensure!(sector.verify(&out.proof)?, "filecoin-proofs' proof fails verify_seal");
                if run > 0 {
                    theirs.push(elapsed);
                }
            }
            theirs_peak_rss = peak_rss();
        }

        let partitions = f64::from(self.proof.partitions());
        let secs = |d: Duration| d.as_secs_f64();
        let ours_s = secs(median(&ours));
        let mut rows = vec![vec![
            format!("provd/{}", names.join("+")),
            format!("{ours_s:.2}"),
            format!("{:.2}", ours_s / partitions),
            format!("{:.2}", median(&synthesis) / partitions),
            format!("{:.2}", median(&device) / partitions),
            format!("{}", provd_peak_rss >> 20),
            String::new(),
        ]];
        let theirs_s = (!theirs.is_empty()).then(|| secs(median(&theirs)));
        if let Some(t) = theirs_s {
            rows.push(vec![
                "filecoin-proofs/cpu".into(),
                format!("{t:.2}"),
                format!("{:.2}", t / partitions),
                String::new(),
                String::new(),
                format!("{}", theirs_peak_rss >> 20),
                format!("{:.3}", ours_s / t),
            ]);
        }
        print_table(
            &[
                "prover",
                "s/sector",
                "s/partition",
                "synthesis s/part",
                "device s/part",
                "peak RSS MiB",
                "provd/them",
            ],
            &rows,
        );
        println!(
            "per-partition estimate {} MiB; measured: peak RSS {} MiB over {} MiB before the runs (key resident), \
             buffer gauges peaked at {} MiB, reserved at {} MiB",
            estimate >> 20,
            provd_peak_rss.saturating_sub(rss_before) >> 20,
            rss_before >> 20,
            peak_buffers >> 20,
            peak_reserved >> 20
        );
        if let Some(held) = &self.device_cap {
            println!("{held}");
        }
        for p in &placed {
            println!(
                "{}: the key {} ({} MiB), a, b and c on the {}; every proof passed verify_seal",
                p.device,
                p.key,
                key.resident_bytes() >> 20,
                p.products
            );
        }
        if let Some(s) = &stream {
            println!(
                "stream: {} sectors submitted at once, every proof checked by verify_seal: {:.2} s a sector \
                 between the first end ({:.2} s) and the last ({:.2} s), measured; device busy {:.1}% of it",
                s.sectors,
                s.seconds_per_sector(),
                s.ends[0],
                s.ends[s.ends.len() - 1],
                100.0 * s.gpu_busy()
            );
        }
        write_json(
            &self.json,
            &json!({
                "benchmark": "porep",
                "environment": environment(),
                "proof": format!("{:?}", self.proof),
                "synthesis": format!("{:?}", self.synthesis),
                "constraints": kind.constraints(),
                "partitions": partitions,
                "runs": self.runs,
                "seal_seconds": sector.times.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
                "parameters_seconds": loaded.as_secs_f64(),
                "key_resident_bytes": kind.resident_bytes(),
                "device_cap": self.device_cap,
                "devices": placed,
                "provd": {
                    "backend": names,
                    "seconds_per_sector": ours.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
                    "median_seconds": ours_s,
                    "synthesis_seconds": synthesis,
                    "device_seconds": device,
                    "peak_rss_bytes": provd_peak_rss,
                    "rss_before_bytes": rss_before,
                    "peak_buffer_bytes": peak_buffers,
                    "peak_reserved_bytes": peak_reserved,
                    "partition_estimate_bytes": estimate,
                },
                "stream": stream.as_ref().map(|s| json!({
                    "sectors": s.sectors,
                    "ends_seconds": s.ends,
                    "seconds_per_sector": s.seconds_per_sector(),
                    "gpu_busy": s.gpu_busy(),
                })),
                "filecoin_proofs": theirs_s.map(|t| json!({
                    "seconds_per_sector": theirs.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
                    "median_seconds": t,
                    "peak_rss_bytes": theirs_peak_rss,
                    "provd_over_theirs": ours_s / t,
                })),
            }),
        )
    }

    /// `self.stream` copies of the sector submitted to `engine` at once,
    /// each job's end noted as it is seen (polled every 5 ms) and its proof
    /// checked by `verify_seal`.
    fn stream_sectors(
        &self,
        engine: &Engine,
        names: &[&str],
        kind: &FilecoinPorepKind,
        circuit: &str,
        sector: &SealedSector,
    ) -> anyhow::Result<Stream> {
        let busy = || device_busy_seconds(engine, names);
        let verifier = Arc::new(crate::groth16::Verifier::new(&kind.key().vk));
        let t = Instant::now();
        let mut waiting = (0..self.stream)
            .map(|_| {
                let spec = job_spec(kind, circuit, sector.input(), Priority::Normal, verifier.clone())?;
                Ok(engine.submit(spec)?)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (mut ends, mut busy_at_first) = (Vec::new(), 0.0);
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for id in waiting {
                let status = engine.status(id).context("a stream job vanished")?;
                if status.outcome.is_none() {
                    still.push(id);
                    continue;
                }
                if ends.is_empty() {
                    busy_at_first = busy();
                }
                ends.push(t.elapsed().as_secs_f64());
                anyhow::ensure!(
                    sector.verify(&job_proof(kind, &status)?)?,
                    "a stream proof fails verify_seal"
                );
            }
            waiting = still;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Stream { sectors: self.stream, ends, busy_between: busy() - busy_at_first })
    }
}
