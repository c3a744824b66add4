//! `provd bench vanilla`: the Filecoin kinds proved from vanilla proofs
//! (SnapDeals, WinningPoSt, WindowPoSt) at one sector size, through provd's
//! engine, against filecoin-proofs' own CPU prover on the same vanilla
//! proofs and parameters, in one run.
//!
//! The sectors are sealed here once (kept in the work directory) and the
//! kind's TEST-ONLY parameters generated once; the vanilla proofs are made
//! as a node makes them. Every proof, provd's and filecoin-proofs', passes
//! filecoin-proofs' verifier.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use filecoin_proofs_api::post::{
    generate_single_window_post_with_vanilla, generate_winning_post_with_vanilla, verify_window_post,
    verify_winning_post,
};
use filecoin_proofs_api::{PoStType, PublicReplicaInfo, RegisteredPoStProof, RegisteredSealProof, SectorId};
use serde_json::json;

use super::filecoin::{job_spec, prove_job};
use super::lane::Urgent;
use super::{environment, median, peak_rss, print_table, reset_peak_rss, write_json};
use crate::backend::Backend;
use crate::circuits::filecoin::post::{FilecoinPostConfig, FilecoinPostKind};
use crate::circuits::filecoin::seal::{kept_sector, post_vanilla_proofs, update_sector, SealedSector};
use crate::circuits::filecoin::snap::{FilecoinSnapConfig, FilecoinSnapKind};
use crate::circuits::filecoin::{prover_id_of_miner, FilecoinConfig, Ids};
use crate::circuits::CircuitKind;
use crate::pipeline::{Engine, JobSpec, PipelineConfig};
use crate::telemetry::Metrics;

/// Which kind `provd bench vanilla` proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VanillaKind {
    Snap,
    WinningPost,
    WindowPost,
}

impl std::str::FromStr for VanillaKind {
    type Err = String;

    /// The kind's name (`filecoin-snap`, …), or without its `filecoin-`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim_start_matches("filecoin-") {
            "snap" => Ok(Self::Snap),
            "winning-post" => Ok(Self::WinningPost),
            "window-post" => Ok(Self::WindowPost),
            _ => Err(format!("'{s}': one of filecoin-snap, filecoin-winning-post, filecoin-window-post")),
        }
    }
}

pub struct VanillaBench {
    pub kind: VanillaKind,
    /// The sector size, as the registered seal proof its sectors are sealed with.
    pub seal: RegisteredSealProof,
    pub runs: usize,
    /// Holds the sealed sectors, the parameter cache and the parent cache.
    pub work_dir: PathBuf,
    pub json: PathBuf,
}

/// filecoin-proofs' verdict on a proof of the case's job.
pub(super) type Verify = Box<dyn Fn(&[u8]) -> anyhow::Result<bool>>;
/// filecoin-proofs' own proof of the case's job.
type TheirProof = Box<dyn Fn() -> anyhow::Result<Vec<u8>>>;

/// One kind's job, ready to run either way.
pub(super) struct Case {
    pub proof: String,
    pub kind: Arc<dyn CircuitKind>,
    pub input: serde_json::Value,
    pub verify: Verify,
    filecoin_proofs: TheirProof,
}

/// A PoSt proof type of `typ` at `seal`'s sector size (WindowPoSt's current
/// version, V1_2).
pub fn post_proof(seal: RegisteredSealProof, typ: PoStType) -> anyhow::Result<RegisteredPoStProof> {
    use filecoin_proofs::constants::*;
    use RegisteredPoStProof::*;
    Ok(match (u64::from(seal.sector_size()), typ) {
        (SECTOR_SIZE_2_KIB, PoStType::Winning) => StackedDrgWinning2KiBV1,
        (SECTOR_SIZE_8_MIB, PoStType::Winning) => StackedDrgWinning8MiBV1,
        (SECTOR_SIZE_512_MIB, PoStType::Winning) => StackedDrgWinning512MiBV1,
        (SECTOR_SIZE_32_GIB, PoStType::Winning) => StackedDrgWinning32GiBV1,
        (SECTOR_SIZE_64_GIB, PoStType::Winning) => StackedDrgWinning64GiBV1,
        (SECTOR_SIZE_2_KIB, PoStType::Window) => StackedDrgWindow2KiBV1_2,
        (SECTOR_SIZE_8_MIB, PoStType::Window) => StackedDrgWindow8MiBV1_2,
        (SECTOR_SIZE_512_MIB, PoStType::Window) => StackedDrgWindow512MiBV1_2,
        (SECTOR_SIZE_32_GIB, PoStType::Window) => StackedDrgWindow32GiBV1_2,
        (SECTOR_SIZE_64_GIB, PoStType::Window) => StackedDrgWindow64GiBV1_2,
        (other, _) => anyhow::bail!("no PoSt proof for sectors of {other} bytes"),
    })
}

impl VanillaBench {
    fn config<P>(&self, proof: P) -> FilecoinConfig<P> {
        FilecoinConfig {
            name: "bench".into(),
            proof,
            parameter_cache: Some(self.work_dir.join("params")),
            test_only_parameters: true,
            synthesis: Default::default(),
            matrices_cache: None,
            priority: None,
        }
    }

    /// Sectors 1..=n, sealed before (and kept) or now, with their directories.
    fn sectors(&self, n: u64) -> anyhow::Result<Vec<(SealedSector, PathBuf)>> {
        (1..=n)
            .map(|sector_id| {
                let dir = self.work_dir.join(format!("sector-{:?}-{sector_id}", self.seal));
                let ids = Ids { prover_id: prover_id_of_miner(1000), sector_id };
                Ok((kept_sector(self.seal, ids, &dir)?, dir))
            })
            .collect()
    }

    fn case(&self) -> anyhow::Result<Case> {
        let prover_id = prover_id_of_miner(1000);
        let randomness = {
            let mut r = [7u8; 32];
            r[31] &= 0x3f;
            r
        };
        match self.kind {
            VanillaKind::Snap => {
                let (key, dir) = self.sectors(1)?.remove(0);
                let update = Arc::new(update_sector(&key, &dir, 2)?);
                let kind =
                    Arc::new(FilecoinSnapKind::load(&FilecoinSnapConfig { ..self.config(update.proof) })?);
                let (u, v) = (update.clone(), update.clone());
                Ok(Case {
                    proof: format!("{:?}", update.proof),
                    kind,
                    input: update.input(),
                    verify: Box::new(move |p| u.verify(p)),
                    filecoin_proofs: Box::new(move || v.prove_with_filecoin_proofs()),
                })
            }
            VanillaKind::WinningPost | VanillaKind::WindowPost => {
                let winning = self.kind == VanillaKind::WinningPost;
                let typ = || if winning { PoStType::Winning } else { PoStType::Window };
                let proof = post_proof(self.seal, typ())?;
                let kind =
                    Arc::new(FilecoinPostKind::load(&FilecoinPostConfig { ..self.config(proof) }, typ())?);
                // A WinningPoSt proves its one elected sector; a WindowPoSt
                // partition here is full.
                let count = proof.as_v1_config().sector_count as u64;
                let sectors = self.sectors(count)?;
                let refs: Vec<(&SealedSector, &Path)> =
                    sectors.iter().map(|(s, d)| (s, d.as_path())).collect();
                let vanilla = post_vanilla_proofs(proof, &refs, randomness)?;
                let replicas: BTreeMap<SectorId, PublicReplicaInfo> = sectors
                    .iter()
                    .map(|(s, _)| (SectorId::from(s.ids.sector_id), PublicReplicaInfo::new(proof, s.comm_r)))
                    .collect();
                use base64::Engine as _;
                let b64: Vec<String> =
                    vanilla.iter().map(|v| base64::engine::general_purpose::STANDARD.encode(v)).collect();
                let mut input = json!({ "vanilla_proofs": b64, "randomness": hex::encode(randomness),
                                        "miner_id": 1000 });
                if !winning {
                    input["partition_index"] = json!(0);
                }
                let verify: Verify = match typ() {
                    PoStType::Winning => {
                        Box::new(move |p| verify_winning_post(&randomness, p, &replicas, prover_id))
                    }
                    PoStType::Window => Box::new(move |p| {
                        verify_window_post(&randomness, &[(proof, p)], &replicas, prover_id)
                    }),
                };
                let filecoin_proofs: TheirProof = match typ() {
                    PoStType::Winning => Box::new(move || {
                        let mut out =
                            generate_winning_post_with_vanilla(proof, &randomness, prover_id, &vanilla)?;
                        anyhow::ensure!(out.len() == 1, "one WinningPoSt proof");
                        Ok(out.remove(0).1)
                    }),
                    PoStType::Window => Box::new(move || {
                        Ok(generate_single_window_post_with_vanilla(
                            proof,
                            &randomness,
                            prover_id,
                            &vanilla,
                            0,
                        )?
                        .0)
                    }),
                };
                Ok(Case { proof: format!("{proof:?}"), kind, input, verify, filecoin_proofs })
            }
        }
    }

    /// The kind's job as `provd bench lane`'s urgent job: the same vanilla
    /// proofs each time (each proof checked by its verifier in the engine).
    pub fn urgent(&self) -> anyhow::Result<Urgent> {
        self.use_work_dir();
        let case = self.case()?;
        let (kind, input) = (case.kind, case.input);
        let key = kind.key().clone();
        let verifier = Arc::new(crate::groth16::Verifier::new(&key.vk));
        let name = format!("{} ({})", kind.kind(), case.proof);
        let job = move |priority, _seed| -> anyhow::Result<JobSpec> {
            job_spec(&*kind, kind.kind(), input.clone(), priority, verifier.clone())
        };
        Ok(Urgent { name, key, job: Box::new(job) })
    }

    /// The kind's job, its sectors sealed and parameters made in the work
    /// directory (for benchmarks that serve it: `bench doors`).
    pub(super) fn prepared(&self) -> anyhow::Result<Case> {
        self.use_work_dir();
        self.case()
    }

    /// Points filecoin-proofs at the work directory's caches (it reads
    /// them once, when first used).
    fn use_work_dir(&self) {
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", self.work_dir.join("params"));
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", self.work_dir.join("parents"));
    }

    pub fn run(&self, backends: Vec<Arc<dyn Backend>>) -> anyhow::Result<()> {
        self.use_work_dir();
        let t = Instant::now();
        let case = self.case()?;
        let partitions = case.kind.split(case.input.clone()).map_err(|e| anyhow::anyhow!("{e}"))?.len();
        eprintln!(
            "{}: {} constraints, {partitions} partition(s); sectors, vanilla proofs and parameters ready in {:.1} s \
             ({} MiB resident)",
            case.proof,
            case.kind.constraints(),
            t.elapsed().as_secs_f64(),
            case.kind.resident_bytes() >> 20,
        );

        let engine = Engine::start(PipelineConfig::default(), backends.clone(), Arc::new(Metrics::new()))?;
        let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
        let (mut ours, mut device, mut synthesis) = (Vec::new(), Vec::new(), Vec::new());
        reset_peak_rss();
        // One warm-up, then `runs` timed jobs.
        for run in 0..=self.runs {
            let job = prove_job(&engine, &names, &*case.kind, "bench", case.input.clone())?;
            anyhow::ensure!((case.verify)(&job.proof)?, "provd's proof fails filecoin-proofs' verifier");
            if run > 0 {
                ours.push(job.elapsed);
                device.push(job.device_seconds);
                synthesis.push(job.synthesis_seconds);
            }
        }
        let provd_peak_rss = peak_rss();
        drop(engine);

        reset_peak_rss();
        let mut theirs = Vec::new();
        for run in 0..=self.runs {
            let t = Instant::now();
            let proof = (case.filecoin_proofs)()?;
            let elapsed = t.elapsed();
            anyhow::ensure!((case.verify)(&proof)?, "filecoin-proofs' proof fails its own verifier");
            if run > 0 {
                theirs.push(elapsed);
            }
        }
        let theirs_peak_rss = peak_rss();

        let n = partitions as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (ours_ms, theirs_ms) = (ms(median(&ours)), ms(median(&theirs)));
        let rows = vec![
            vec![
                format!("provd/{}", names.join("+")),
                format!("{ours_ms:.1}"),
                format!("{:.1}", ours_ms / n),
                format!("{:.1}", median(&synthesis) * 1e3 / n),
                format!("{:.1}", median(&device) * 1e3 / n),
                format!("{}", provd_peak_rss >> 20),
                format!("{:.3}", ours_ms / theirs_ms),
            ],
            vec![
                "filecoin-proofs/cpu".into(),
                format!("{theirs_ms:.1}"),
                format!("{:.1}", theirs_ms / n),
                String::new(),
                String::new(),
                format!("{}", theirs_peak_rss >> 20),
                String::new(),
            ],
        ];
        print_table(
            &[
                "prover",
                "ms/job",
                "ms/partition",
                "synthesis ms/part",
                "device ms/part",
                "peak RSS MiB",
                "provd/them",
            ],
            &rows,
        );
        write_json(
            &self.json,
            &json!({
                "benchmark": "vanilla",
                "environment": environment(),
                "kind": case.kind.kind(),
                "proof": case.proof,
                "constraints": case.kind.constraints(),
                "partitions": partitions,
                "runs": self.runs,
                "resident_bytes": case.kind.resident_bytes(),
                "provd": {
                    "backend": names,
                    "seconds_per_job": ours.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
                    "median_ms": ours_ms,
                    "synthesis_seconds": synthesis,
                    "device_seconds": device,
                    "peak_rss_bytes": provd_peak_rss,
                },
                "filecoin_proofs": {
                    "seconds_per_job": theirs.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
                    "median_ms": theirs_ms,
                    "peak_rss_bytes": theirs_peak_rss,
                },
                "provd_over_theirs": ours_ms / theirs_ms,
            }),
        )
    }
}
