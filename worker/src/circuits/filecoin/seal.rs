//! Sealing a sector of random data with filecoin-proofs (PC1, PC2, C1), to
//! have a C1 output to prove: for tests and benchmarks, with TEST-ONLY
//! parameters. A storage provider seals with its own pipeline (lotus, Curio).
//!
//! PC1 keeps its graph's parents in filecoin-proofs' parent cache
//! (`FIL_PROOFS_PARENT_CACHE`, by default `/var/tmp/filecoin-parents`).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use filecoin_proofs_api::seal::{
    add_piece, seal_commit_phase1, seal_pre_commit_phase1, seal_pre_commit_phase2, SealCommitPhase1Output,
};
use filecoin_proofs_api::{PaddedBytesAmount, RegisteredSealProof, SectorId, UnpaddedBytesAmount};
use rand::{RngCore, SeedableRng};

use super::Ids;

/// A sealed sector's C1 output and what its proof is checked against.
pub struct SealedSector {
    pub proof: RegisteredSealProof,
    pub ids: Ids,
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    pub ticket: [u8; 32],
    pub seed: [u8; 32],
    /// The C1 output's JSON, as lotus's `Commit1Out` and Curio hold it.
    pub c1_json: Vec<u8>,
    /// How long PC1, PC2 and C1 took.
    pub times: [Duration; 3],
}

impl SealedSector {
    /// The sector as JSON, to be kept and read back by [`SealedSector::from_json`].
    pub fn to_json(&self) -> Vec<u8> {
        let c1: serde_json::Value = serde_json::from_slice(&self.c1_json).expect("C1 output is JSON");
        serde_json::to_vec(&serde_json::json!({
            "proof": self.proof,
            "prover_id": hex::encode(self.ids.prover_id),
            "sector_id": self.ids.sector_id,
            "comm_r": self.comm_r, "comm_d": self.comm_d, "ticket": self.ticket, "seed": self.seed,
            "seal_seconds": self.times.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
            "c1": c1,
        }))
        .expect("JSON values encode")
    }

    pub fn from_json(bytes: &[u8]) -> anyhow::Result<Self> {
        #[derive(serde::Deserialize)]
        struct Kept {
            proof: RegisteredSealProof,
            prover_id: String,
            sector_id: u64,
            comm_r: [u8; 32],
            comm_d: [u8; 32],
            ticket: [u8; 32],
            seed: [u8; 32],
            seal_seconds: [f64; 3],
            c1: serde_json::Value,
        }
        let k: Kept = serde_json::from_slice(bytes)?;
        let mut prover_id = [0u8; 32];
        hex::decode_to_slice(&k.prover_id, &mut prover_id)?;
        Ok(Self {
            proof: k.proof,
            ids: Ids { prover_id, sector_id: k.sector_id },
            comm_r: k.comm_r,
            comm_d: k.comm_d,
            ticket: k.ticket,
            seed: k.seed,
            c1_json: serde_json::to_vec(&k.c1)?,
            times: k.seal_seconds.map(Duration::from_secs_f64),
        })
    }

    /// The parsed C1 output (for filecoin-proofs' own `seal_commit_phase2`).
    pub fn c1(&self) -> anyhow::Result<SealCommitPhase1Output> {
        Ok(serde_json::from_slice(&self.c1_json)?)
    }

    /// The job input of `POST /v1/prove` for this sector.
    pub fn input(&self) -> serde_json::Value {
        let c1: serde_json::Value = serde_json::from_slice(&self.c1_json).expect("C1 output is JSON");
        serde_json::json!({
            "c1": c1,
            "prover_id": hex::encode(self.ids.prover_id),
            "sector_id": self.ids.sector_id,
        })
    }

    /// Whether `proof` is this sector's proof, by filecoin-proofs'
    /// `verify_seal` (reading the verifying key from the parameter cache
    /// that `FIL_PROOFS_PARAMETER_CACHE` names).
    pub fn verify(&self, proof: &[u8]) -> anyhow::Result<bool> {
        filecoin_proofs_api::seal::verify_seal(
            self.proof,
            self.comm_r,
            self.comm_d,
            self.ids.prover_id,
            SectorId::from(self.ids.sector_id),
            self.ticket,
            self.seed,
            proof,
        )
    }
}

/// Seals a sector of `proof`'s size, filled with data drawn from `seed`,
/// for `ids`, in `dir` (which holds the staged and sealed files and the
/// sector's cache afterwards).
pub fn seal_sector(
    proof: RegisteredSealProof,
    ids: Ids,
    dir: &Path,
    seed: u64,
) -> anyhow::Result<SealedSector> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (staged, sealed, cache) = (dir.join("staged"), dir.join("sealed"), dir.join("cache"));
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let size = UnpaddedBytesAmount::from(PaddedBytesAmount(u64::from(proof.sector_size())));

    // The piece: random bytes, padded into the staged sector file.
    let mut data = vec![0u8; u64::from(size) as usize];
    rng.fill_bytes(&mut data);
    let mut target = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&staged)?;
    let (piece, _) = add_piece(proof, &data[..], &mut target, size, &[])?;
    target.seek(SeekFrom::Start(0))?;
    drop((data, target));
    File::create(&sealed)?;

    let mut draw = || {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        b[31] &= 0x3f; // a field element, as chain randomness is used
        b
    };
    let (ticket, seed) = (draw(), draw());
    let sector_id = SectorId::from(ids.sector_id);
    let pieces = [piece];

    let t = Instant::now();
    let pc1 =
        seal_pre_commit_phase1(proof, &cache, &staged, &sealed, ids.prover_id, sector_id, ticket, &pieces)
            .context("PC1")?;
    let pc1_time = t.elapsed();
    let t = Instant::now();
    let pc2 = seal_pre_commit_phase2(pc1, &cache, &sealed).context("PC2")?;
    let pc2_time = t.elapsed();
    let (comm_r, comm_d) = (pc2.comm_r, pc2.comm_d);
    let t = Instant::now();
    let c1 = seal_commit_phase1(&cache, &sealed, ids.prover_id, sector_id, ticket, seed, pc2, &pieces)
        .context("C1")?;
    let c1_time = t.elapsed();
    Ok(SealedSector {
        proof,
        ids,
        comm_r,
        comm_d,
        ticket,
        seed,
        c1_json: serde_json::to_vec(&c1)?,
        times: [pc1_time, pc2_time, c1_time],
    })
}
