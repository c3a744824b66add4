//! The Filecoin kinds proved from vanilla proofs (WinningPoSt, WindowPoSt,
//! SnapDeals) end to end: 2 KiB sectors sealed here with filecoin-proofs
//! (one of them then updated with new data), their vanilla proofs made with
//! filecoin-proofs-api as a storage provider's node makes them, proved by
//! the real binary over HTTP on the CPU backend, and checked with
//! filecoin-proofs-api's own `verify_winning_post`, `verify_window_post` and
//! `verify_empty_sector_update_proof`, against TEST-ONLY parameters in the
//! cache the test binaries share ([`provd_e2e::filecoin_parameter_cache`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use base64::Engine as _;
use filecoin_proofs_api::post::{
    generate_winning_post_sector_challenge, verify_window_post, verify_winning_post,
};
use filecoin_proofs_api::update::verify_empty_sector_update_proof;
use filecoin_proofs_api::{
    PublicReplicaInfo, RegisteredPoStProof, RegisteredSealProof, RegisteredUpdateProof, SectorId,
};
use provd::circuits::filecoin::seal::{
    post_vanilla_proofs, seal_sector, update_sector, SealedSector, UpdatedSector,
};
use provd::circuits::filecoin::{Ids, Registered};
use provd_e2e::Server;
use serde_json::{json, Value};

const SEAL: RegisteredSealProof = RegisteredSealProof::StackedDrg2KiBV1_1;
const UPDATE: RegisteredUpdateProof = RegisteredUpdateProof::StackedDrg2KiBV1;
const WINNING: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWinning2KiBV1;
const WINDOW: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
/// Before V1_2, a WindowPoSt's challenges depended on its partition's index.
const WINDOW_V1: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWindow2KiBV1;
const MINER: u64 = 1000;

struct Fixture {
    /// The sealed sectors' files.
    _dir: tempfile::TempDir,
    params: PathBuf,
    /// Sealed 2 KiB sectors (ids 1, 2, 3) and where each one's files are.
    sectors: Vec<(SealedSector, PathBuf)>,
    /// Sector 4, sealed then updated with new data.
    update: UpdatedSector,
}

impl Fixture {
    /// A server's config: the PoSt circuits, or the SnapDeals one (whose
    /// 656 MB of parameters the PoSt tests need not load).
    fn config(&self, snap: bool) -> String {
        let params = &self.params;
        let entry = |kind: &str, name: &str, proof: &str| {
            format!(
                "[[circuits]]\nkind = \"{kind}\"\nname = \"{name}\"\nproof = \"{proof}\"\n\
                 parameter_cache = \"{}\"\ntest_only_parameters = true\n",
                params.display()
            )
        };
        if snap {
            return entry("filecoin-snap", "snap-2k", &format!("{UPDATE:?}"));
        }
        entry("filecoin-winning-post", "winning-2k", &format!("{WINNING:?}"))
            + &entry("filecoin-window-post", "window-2k", &format!("{WINDOW:?}"))
            + &entry("filecoin-window-post", "window-2k-v1", &format!("{WINDOW_V1:?}"))
    }

    fn sector(&self, id: u64) -> &(SealedSector, PathBuf) {
        self.sectors.iter().find(|(s, _)| s.ids.sector_id == id).expect("a sealed sector")
    }

    /// Each sector's vanilla proof for `proof`'s challenges of `randomness`,
    /// as filecoin-proofs-api makes it (bincode bytes).
    fn vanilla(&self, proof: RegisteredPoStProof, randomness: [u8; 32], ids: &[u64]) -> Vec<Vec<u8>> {
        let sectors: Vec<_> = ids.iter().map(|&i| self.sector(i)).map(|(s, at)| (s, at.as_path())).collect();
        post_vanilla_proofs(proof, &sectors, randomness).unwrap()
    }

    fn public(&self, proof: RegisteredPoStProof, ids: &[u64]) -> BTreeMap<SectorId, PublicReplicaInfo> {
        ids.iter()
            .map(|&i| (SectorId::from(i), PublicReplicaInfo::new(proof, self.sector(i).0.comm_r)))
            .collect()
    }
}

/// Seals the sectors once; the circuits' TEST-ONLY parameters come from the
/// cache the test binaries share (generated here, in process, if this is the
/// first to need them, so that servers started at once do not race to).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let shared = provd_e2e::SharedParameters::hold();
        // filecoin-proofs reads these once, when first used: before any sealing.
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &shared.dir);
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", dir.path().join("parents"));
        let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
        let sectors = (1..=3)
            .map(|sector_id| {
                let at = dir.path().join(format!("sector-{sector_id}"));
                (seal_sector(SEAL, Ids { prover_id, sector_id }, &at, sector_id).unwrap(), at)
            })
            .collect();
        let at = dir.path().join("sector-4");
        let key = seal_sector(SEAL, Ids { prover_id, sector_id: 4 }, &at, 4).unwrap();
        let update = update_sector(&key, &at, 4).unwrap();
        let params = shared.dir.clone();
        for proof in [
            Registered::WinningPost(WINNING),
            Registered::WindowPost(WINDOW),
            Registered::WindowPost(WINDOW_V1),
            Registered::Update(UPDATE),
        ] {
            shared.load(proof);
        }
        // Each parameter file is the size its circuit's count says (what
        // docs/operations.md gives for 32 GiB, from `provd bench sizes`).
        let size = |id: String| {
            let file = params.join(format!("v28-{id}.params"));
            std::fs::metadata(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())).len()
        };
        for proof in [WINNING, WINDOW] {
            let id = proof.circuit_identifier().unwrap();
            assert_eq!(
                size(id),
                provd::circuits::filecoin::post::count(proof).unwrap().parameter_bytes(),
                "{proof:?}"
            );
        }
        // (RegisteredUpdateProof::circuit_identifier names PoRep's file, so
        // the update's is found by its prefix.)
        let snap_file = std::fs::read_dir(&params)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.to_string_lossy().contains("v28-empty-sector-update-")
                    && p.extension().is_some_and(|e| e == "params")
            })
            .expect("the SnapDeals parameter file");
        assert_eq!(
            std::fs::metadata(snap_file).unwrap().len(),
            provd::circuits::filecoin::snap::count(UPDATE).unwrap().parameter_bytes()
        );
        Fixture { _dir: dir, params, sectors, update }
    })
}

/// A field element's bytes, as chain randomness is.
fn randomness(seed: u8) -> [u8; 32] {
    let mut r = [seed; 32];
    r[31] &= 0x3f;
    r
}

fn input(vanilla: &[Vec<u8>], randomness: [u8; 32], partition: Option<usize>) -> Value {
    let b64: Vec<String> =
        vanilla.iter().map(|v| base64::engine::general_purpose::STANDARD.encode(v)).collect();
    let mut input =
        json!({ "vanilla_proofs": b64, "randomness": hex::encode(randomness), "miner_id": MINER });
    if let Some(k) = partition {
        input["partition_index"] = json!(k);
    }
    input
}

fn proof_of(job: &Value) -> Vec<u8> {
    hex::decode(job["result"]["proof"].as_str().unwrap_or_else(|| panic!("no proof in {job}"))).unwrap()
}

#[test]
fn winning_and_window_posts_are_proved_over_http_and_filecoin_proofs_accepts_them() {
    let f = fixture();
    let server = Server::start(&f.config(false), &[]);
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);

    // WinningPoSt: the sector the chain's randomness elects among three.
    let r = randomness(7);
    let elected = generate_winning_post_sector_challenge(WINNING, &r, 3, prover_id).unwrap();
    let id = f.sectors[elected[0] as usize].0.ids.sector_id;
    let (status, job) = server.prove_input("winning-2k", &input(&f.vanilla(WINNING, r, &[id]), r, None));
    assert_eq!(
        (status, job["state"].as_str(), job["priority"].as_str()),
        (202, Some("succeeded"), Some("critical")),
        "{job}"
    );
    let proof = proof_of(&job);
    assert_eq!(proof.len(), 192, "one partition");
    assert!(
        verify_winning_post(&r, &proof, &f.public(WINNING, &[id]), prover_id).unwrap(),
        "verify_winning_post"
    );
    assert!(!verify_winning_post(&randomness(8), &proof, &f.public(WINNING, &[id]), prover_id).unwrap());

    // WindowPoSt: a partition of two sectors (a 2 KiB partition's size).
    let r = randomness(9);
    let (status, job) = server.prove_input("window-2k", &input(&f.vanilla(WINDOW, r, &[1, 2]), r, Some(0)));
    assert_eq!(
        (status, job["state"].as_str(), job["priority"].as_str()),
        (202, Some("succeeded"), Some("high")),
        "{job}"
    );
    let proof = proof_of(&job);
    assert!(
        verify_window_post(&r, &[(WINDOW, &proof)], &f.public(WINDOW, &[1, 2]), prover_id).unwrap(),
        "verify_window_post"
    );
    // One sector of a partition of two: filecoin-proofs pads it; still one proof.
    let (_, job) = server.prove_input("window-2k", &input(&f.vanilla(WINDOW, r, &[3]), r, Some(0)));
    assert!(verify_window_post(&r, &[(WINDOW, &proof_of(&job))], &f.public(WINDOW, &[3]), prover_id).unwrap());

    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    let kinds: Vec<_> = circuits["circuits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["kind"].clone(), c["priority"].clone()))
        .collect();
    assert!(kinds.contains(&(json!("filecoin-winning-post"), json!("critical"))), "{circuits}");
    assert!(kinds.contains(&(json!("filecoin-window-post"), json!("high"))), "{circuits}");
}

#[test]
fn bad_post_inputs_are_refused_naming_the_cause() {
    let f = fixture();
    let server = Server::start(&f.config(false), &[]);
    let r = randomness(11);
    let window = f.vanilla(WINDOW, r, &[1, 2]);
    let refused = |circuit: &str, input: Value, says: &str| {
        let (status, reply) = server.prove_input(circuit, &input);
        eprintln!("REFUSAL CASE: {says}");
        assert_eq!(status, 400, "{reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(says), "wanted '{says}' in: {error}");
    };
    // Another randomness than the one the vanilla proofs answer.
    refused("window-2k", input(&window, randomness(12), Some(0)), "do not verify");
    // Another partition of the deadline than the one they were made for:
    // where the index enters the challenges (before V1_2), the vanilla
    // proofs do not verify. (In V1_2 it does not enter the proof at all.)
    let v1 = f.vanilla(WINDOW_V1, r, &[1, 2]);
    refused("window-2k-v1", input(&v1, r, Some(1)), "partition index");
    // A vanilla proof tampered with: a byte of a Merkle path flipped.
    let mut tampered = window.clone();
    let at = tampered[0].len() - 40;
    tampered[0][at] ^= 1;
    let (status, reply) = server.prove_input("window-2k", &input(&tampered, r, Some(0)));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("vanilla proof"), "{reply}");
    // Bytes that are no vanilla proof at all.
    refused(
        "window-2k",
        input(&[vec![1, 2, 3]], r, Some(0)),
        "is not a StackedDrgWindow2KiBV1_2 vanilla proof",
    );
    // Another sector size's proof type.
    let mut other = input(&window, r, Some(0));
    other["registered_proof"] = json!("StackedDrgWindow32GiBV1_2");
    refused("window-2k", other, "this circuit serves StackedDrgWindow2KiBV1_2");
    // More sectors than a partition holds, and a WindowPoSt without its partition.
    refused("window-2k", input(&f.vanilla(WINDOW, r, &[1, 2, 3]), r, Some(0)), "takes 1 to 2");
    refused("window-2k", input(&window, r, None), "names its partition_index");
    // A WinningPoSt proves one sector, in its one partition.
    let winning = [f.vanilla(WINNING, r, &[1]), f.vanilla(WINNING, r, &[2])].concat();
    refused("winning-2k", input(&winning, r, None), "takes 1");
    refused("winning-2k", input(&winning[..1], r, Some(1)), "one partition");
    refused(
        "winning-2k",
        json!({ "vanilla_proofs": [], "randomness": hex::encode(r) }),
        "give one of prover_id and miner_id",
    );
    // Nothing was proved, and the worker is as it was.
    let (_, status) = server.call("GET", "/v1/status", None);
    assert_eq!(status["snapshot"]["reserved_bytes"], status["snapshot"]["key_bytes"], "{status}");
}

#[test]
fn snap_deals_updates_are_proved_over_http_and_filecoin_proofs_accepts_them() {
    let f = fixture();
    let server = Server::start(&f.config(true), &[]);
    let u = &f.update;
    let (status, job) = server.prove_input("snap-2k", &u.input());
    assert_eq!(
        (status, job["state"].as_str(), job["priority"].as_str()),
        (202, Some("succeeded"), Some("normal")),
        "{job}"
    );
    let proof = proof_of(&job);
    assert_eq!(proof.len(), 192, "a 2 KiB update has one partition");
    assert!(u.verify(&proof).unwrap(), "verify_empty_sector_update_proof");
    // The same proof is no proof of an update to another CommR.
    assert!(!verify_empty_sector_update_proof(UPDATE, &proof, u.comm_r_old, u.comm_r_old, u.comm_d_new)
        .unwrap_or(false));

    // Refusals, each naming its cause.
    let refused = |input: Value, says: &str| {
        let (status, reply) = server.prove_input("snap-2k", &input);
        assert_eq!(status, 400, "{says}: {reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(says), "wanted '{says}' in: {error}");
    };
    // Commitments other than those the vanilla proof was made for.
    let mut other = u.input();
    other["comm_r_new"] = json!(hex::encode(u.comm_r_old));
    refused(other, "vanilla proof 0 does not verify as partition 0");
    // A vanilla proof tampered with: a byte of a Merkle path flipped.
    let mut tampered = u.vanilla.clone();
    let at = tampered[0].len() - 40;
    tampered[0][at] ^= 1;
    let (status, reply) = server.prove_input("snap-2k", &u.input_with(&tampered));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("vanilla proof 0"), "{reply}");
    // Bytes that are no vanilla proof, another sector size's proof type,
    // and more partitions than the sector size has.
    refused(u.input_with(&[vec![1, 2, 3]]), "is not a StackedDrg2KiBV1 partition proof");
    let mut other = u.input();
    other["registered_proof"] = json!("StackedDrg32GiBV1");
    refused(other, "this circuit serves StackedDrg2KiBV1");
    refused(u.input_with(&[u.vanilla.clone(), u.vanilla.clone()].concat()), "takes 1, one per partition");
    let mut other = u.input();
    other["comm_d_new"] = json!("12");
    refused(other, "comm_d_new '12' is not 64 hex digits");
}
