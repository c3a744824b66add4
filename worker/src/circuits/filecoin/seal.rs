//! Sealing a sector of random data with filecoin-proofs (PC1, PC2, C1), to
//! have a C1 output to prove, and what a node derives from sealed sectors
//! for the other kinds (PoSt vanilla proofs, a SnapDeals update and its
//! vanilla proofs): for tests and benchmarks, with TEST-ONLY parameters. A
//! storage provider does this with its own node (lotus, Curio).
//!
//! PC1 keeps its graph's parents in filecoin-proofs' parent cache
//! (`FIL_PROOFS_PARENT_CACHE`, by default `/var/tmp/filecoin-parents`).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use filecoin_proofs_api::post::{generate_fallback_sector_challenges, generate_single_vanilla_proof};
use filecoin_proofs_api::seal::{
    add_piece, seal_commit_phase1, seal_pre_commit_phase1, seal_pre_commit_phase2, SealCommitPhase1Output,
};
use filecoin_proofs_api::update::{
    empty_sector_update_encode_into, generate_empty_sector_update_proof_with_vanilla,
    generate_partition_proofs, verify_empty_sector_update_proof,
};
use filecoin_proofs_api::{
    PaddedBytesAmount, PartitionProofBytes, PrivateReplicaInfo, RegisteredPoStProof, RegisteredSealProof,
    RegisteredUpdateProof, SectorId, UnpaddedBytesAmount,
};
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

/// A sector sealed before in `dir` by [`kept_sector`] (its `sealed.json`),
/// or sealed now and kept there: for benchmarks that run again.
pub fn kept_sector(proof: RegisteredSealProof, ids: Ids, dir: &Path) -> anyhow::Result<SealedSector> {
    let kept = dir.join("sealed.json");
    if let Ok(bytes) = std::fs::read(&kept) {
        return SealedSector::from_json(&bytes).with_context(|| format!("{}", kept.display()));
    }
    let sector = seal_sector(proof, ids, dir, ids.sector_id)?;
    std::fs::write(&kept, sector.to_json())?;
    Ok(sector)
}

/// Each of `sectors`' vanilla PoSt proof for `proof`'s challenges of
/// `randomness`, as a node's `generate_single_vanilla_proof` makes them
/// (bincode bytes), in the order given. Each sector is sealed in its
/// directory (by [`seal_sector`]), for one prover.
pub fn post_vanilla_proofs(
    proof: RegisteredPoStProof,
    sectors: &[(&SealedSector, &Path)],
    randomness: [u8; 32],
) -> anyhow::Result<Vec<Vec<u8>>> {
    let prover_id = sectors.first().context("no sectors")?.0.ids.prover_id;
    let ids: Vec<SectorId> = sectors.iter().map(|(s, _)| SectorId::from(s.ids.sector_id)).collect();
    let challenges = generate_fallback_sector_challenges(proof, &randomness, &ids, prover_id)?;
    sectors
        .iter()
        .zip(&ids)
        .map(|((sealed, at), id)| {
            let replica = PrivateReplicaInfo::new(proof, sealed.comm_r, at.join("cache"), at.join("sealed"));
            generate_single_vanilla_proof(proof, *id, &replica, &challenges[id])
        })
        .collect()
}

/// A SnapDeals update of a sealed sector, as a node holds it when it asks
/// for the update's proof.
pub struct UpdatedSector {
    pub proof: RegisteredUpdateProof,
    pub comm_r_old: [u8; 32],
    pub comm_r_new: [u8; 32],
    pub comm_d_new: [u8; 32],
    /// Each partition's vanilla proof (bincode bytes), in partition order.
    pub vanilla: Vec<Vec<u8>>,
}

impl UpdatedSector {
    /// The job input of `POST /v1/prove` for a `filecoin-snap` circuit,
    /// with these vanilla proofs.
    pub fn input_with(&self, vanilla: &[Vec<u8>]) -> serde_json::Value {
        use base64::Engine as _;
        let b64: Vec<String> =
            vanilla.iter().map(|v| base64::engine::general_purpose::STANDARD.encode(v)).collect();
        serde_json::json!({
            "vanilla_proofs": b64,
            "comm_r_old": hex::encode(self.comm_r_old),
            "comm_r_new": hex::encode(self.comm_r_new),
            "comm_d_new": hex::encode(self.comm_d_new),
        })
    }

    /// The job input with the update's own vanilla proofs.
    pub fn input(&self) -> serde_json::Value {
        self.input_with(&self.vanilla)
    }

    /// Whether `proof` proves this update, by filecoin-proofs'
    /// `verify_empty_sector_update_proof` (reading the verifying key from
    /// the parameter cache that `FIL_PROOFS_PARAMETER_CACHE` names).
    pub fn verify(&self, proof: &[u8]) -> anyhow::Result<bool> {
        verify_empty_sector_update_proof(self.proof, proof, self.comm_r_old, self.comm_r_new, self.comm_d_new)
    }

    /// filecoin-proofs' own proof of the update, from the same vanilla proofs.
    pub fn prove_with_filecoin_proofs(&self) -> anyhow::Result<Vec<u8>> {
        let vanilla = self.vanilla.iter().cloned().map(PartitionProofBytes).collect();
        Ok(generate_empty_sector_update_proof_with_vanilla(
            self.proof,
            vanilla,
            self.comm_r_old,
            self.comm_r_new,
            self.comm_d_new,
        )?
        .0)
    }
}

/// The registered update proof of a seal proof's sector size.
pub fn update_proof_of(seal: RegisteredSealProof) -> anyhow::Result<RegisteredUpdateProof> {
    use filecoin_proofs::constants::*;
    use RegisteredUpdateProof::*;
    Ok(match u64::from(seal.sector_size()) {
        SECTOR_SIZE_2_KIB => StackedDrg2KiBV1,
        SECTOR_SIZE_8_MIB => StackedDrg8MiBV1,
        SECTOR_SIZE_512_MIB => StackedDrg512MiBV1,
        SECTOR_SIZE_32_GIB => StackedDrg32GiBV1,
        SECTOR_SIZE_64_GIB => StackedDrg64GiBV1,
        other => anyhow::bail!("no update proof for sectors of {other} bytes"),
    })
}

/// Encodes new data (drawn from `seed`) into `sector`, sealed in `dir` by
/// [`seal_sector`], as SnapDeals does, and reads the update's vanilla
/// proofs. The new replica and its cache go into `dir` too; the sector key
/// is left as it was.
pub fn update_sector(sector: &SealedSector, dir: &Path, seed: u64) -> anyhow::Result<UpdatedSector> {
    let proof = update_proof_of(sector.proof)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let size = UnpaddedBytesAmount::from(PaddedBytesAmount(u64::from(sector.proof.sector_size())));
    let mut data = vec![0u8; u64::from(size) as usize];
    rng.fill_bytes(&mut data);
    let staged = dir.join("update-staged");
    let mut file = File::create(&staged)?;
    let (piece, _) = add_piece(sector.proof, &data[..], &mut file, size, &[])?;
    drop((data, file));
    let (replica, cache) = (dir.join("update-sealed"), dir.join("update-cache"));
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    // The new replica's file, the sector key's size, to be written into.
    File::create(&replica)?.set_len(u64::from(sector.proof.sector_size()))?;
    let (key, key_cache) = (dir.join("sealed"), dir.join("cache"));
    let encoded =
        empty_sector_update_encode_into(proof, &replica, &cache, &key, &key_cache, &staged, &[piece])
            .context("encoding the update")?;
    let (comm_r_new, comm_d_new) = (encoded.comm_r_new, encoded.comm_d_new);
    let vanilla = generate_partition_proofs(
        proof,
        sector.comm_r,
        comm_r_new,
        comm_d_new,
        &key,
        &key_cache,
        &replica,
        &cache,
    )
    .context("the update's vanilla proofs")?
    .into_iter()
    .map(|p| p.0)
    .collect();
    Ok(UpdatedSector { proof, comm_r_old: sector.comm_r, comm_r_new, comm_d_new, vanilla })
}
