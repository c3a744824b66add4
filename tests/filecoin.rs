//! Filecoin PoRep C2 end to end: sectors sealed here with filecoin-proofs
//! (PC1, PC2, C1), proved by the real binary over HTTP on the CPU backend,
//! and checked with filecoin-proofs' own `verify_seal`, against TEST-ONLY
//! parameters in the cache the test binaries share
//! ([`provd_e2e::filecoin_parameter_cache`]).

use std::sync::OnceLock;

use provd::bench::ballast::Beside;
use provd::circuits::filecoin::seal::{seal_sector, SealedSector};
use provd::circuits::filecoin::Ids;
use provd_e2e::{Server, JOBS_DEADLINE};
use serde_json::{json, Value};

const PROOF: &str = "StackedDrg2KiBV1_1";
/// Sectors sealed for the tests (2 KiB ones seal in well under a second;
/// each proof of their 2.7M-constraint partition takes a while on 2 cores).
const SECTORS: u64 = 2;

struct Fixture {
    /// The sealed sectors' files.
    _dir: tempfile::TempDir,
    params: std::path::PathBuf,
    /// 2 KiB sectors, ids 1..=SECTORS.
    sectors: Vec<SealedSector>,
    /// Host bytes the circuit holds and one partition's estimate.
    resident: u64,
    footprint: u64,
}

impl Fixture {
    fn params(&self) -> std::path::PathBuf {
        self.params.clone()
    }

    fn config(&self, extra: &str) -> String {
        format!(
            "[[circuits]]\nkind = \"filecoin-porep\"\nname = \"porep-2k\"\nproof = \"{PROOF}\"\n\
             parameter_cache = \"{}\"\n[server]\nmax_body_bytes = 4194304\n{extra}",
            self.params().display()
        )
    }
}

/// Seals the sectors once; the circuit's TEST-ONLY parameters come from the
/// cache the test binaries share (generated here, in process, if this is the
/// first to need them, so that servers started at once do not race to).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let params = provd_e2e::SharedParameters::hold();
        // filecoin-proofs reads these once, when first used: before any sealing.
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &params.dir);
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", dir.path().join("parents"));
        let prover_id = provd::circuits::filecoin::prover_id_of_miner(1000);
        let seal = |proof: &str, sector_id: u64| {
            let proof = serde_json::from_value(json!(proof)).unwrap();
            let at = dir.path().join(format!("sector-{proof:?}-{sector_id}"));
            seal_sector(proof, Ids { prover_id, sector_id }, &at, sector_id).unwrap()
        };
        let sectors = (1..=SECTORS).map(|id| seal(PROOF, id)).collect();
        let seal = serde_json::from_value(json!(PROOF)).unwrap();
        let kind = params.load(provd::circuits::filecoin::Registered::Seal(seal));
        let (resident, footprint) =
            (kind.resident_bytes(), provd::pipeline::Footprint::of(kind.key()).total());
        Fixture { _dir: dir, params: params.dir.clone(), sectors, resident, footprint }
    })
}

/// Submits a sector: the submission's status, and the error of a refused
/// one, or the job of an accepted one once it has ended.
fn prove(server: &Server, input: &Value) -> (u16, Value) {
    server.prove_input("porep-2k", input)
}

fn seal_proof(job: &Value) -> Vec<u8> {
    hex::decode(job["result"]["proof"].as_str().unwrap_or_else(|| panic!("no sector proof in {job}")))
        .unwrap()
}

#[test]
fn bad_c1_outputs_are_the_clients_errors_with_the_reason() {
    let f = fixture();
    let server = Server::start(&f.config(""), &[]);
    let sector = &f.sectors[0];
    let refused = |input: Value, says: &str| {
        let (status, err) = prove(&server, &input);
        assert_eq!(status, 400, "{says}: {err}");
        let e = err["error"].as_str().unwrap_or_default();
        assert!(e.contains(says), "expected '{says}' in: {e}");
    };

    // Tampered: a commitment changed, or a node of a Merkle path.
    let mut tampered = sector.input();
    tampered["c1"]["comm_r"][0] = json!(tampered["c1"]["comm_r"][0].as_u64().unwrap() ^ 1);
    refused(tampered, "vanilla proofs do not verify");
    let mut tampered = sector.input();
    let node = first_digest(&mut tampered["c1"]["vanilla_proofs"]).expect("a digest in the vanilla proofs");
    node[0] = json!(node[0].as_u64().unwrap() ^ 1);
    refused(tampered, "vanilla proofs do not verify");

    // Another sector's id, another prover.
    let mut other = sector.input();
    other["sector_id"] = json!(sector.ids.sector_id + 100);
    refused(other, "sealed for another sector");
    let mut other = sector.input();
    other["prover_id"] = json!(hex::encode([7u8; 32]));
    refused(other, "sealed for another sector");

    // A C1 output for another sector size (8 MiB sectors' Merkle trees have
    // 2 KiB ones' shape, so a 2 KiB C1 output labelled 8 MiB decodes as
    // one: sealing a real 8 MiB sector here would take minutes for the same
    // check), and one whose vanilla proofs alone are labelled 8 MiB.
    let eight_mib = |registered: &str| {
        let mut input = sector.input();
        let tagged = input["c1"]["vanilla_proofs"]["StackedDrg2KiBV1"].take();
        input["c1"]["vanilla_proofs"] = json!({ "StackedDrg8MiBV1": tagged });
        input["c1"]["registered_proof"] = json!(registered);
        input
    };
    refused(
        eight_mib("StackedDrg8MiBV1_1"),
        "the C1 output is for StackedDrg8MiBV1_1; this circuit serves StackedDrg2KiBV1_1",
    );
    refused(eight_mib(PROOF), "its vanilla proofs are tagged for a sector of 8388608 bytes");

    // Shapes that are not a sector at all.
    refused(json!({"c1": {}, "prover_id": "00", "sector_id": 1}), "malformed");
    refused(json!({"c1": "not base64!", "miner_id": 1000, "sector_id": 1}), "not base64");
    let mut both = sector.input();
    both["miner_id"] = json!(1000);
    refused(both, "one of prover_id and miner_id");
    let (status, err) = server.call(
        "POST",
        "/v1/prove",
        Some(&json!({"circuit": "porep-2k", "partitions": [{"seed": 1}]}).to_string()),
    );
    assert_eq!(status, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("partition 0"), "{err}");
    let (status, err) = server.call(
        "POST",
        "/v1/prove",
        Some(&json!({"circuit": "porep-2k", "input": sector.input(), "partitions": []}).to_string()),
    );
    assert_eq!(status, 400, "{err}");

    // Nothing was queued, and the worker is whole: it takes the C1 output
    // as lotus hands it over (base64 of its JSON) and the prover id as bytes.
    assert_eq!(server.metric("provd_partitions_total"), 0.0);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&sector.c1_json);
    let input = json!({"c1": b64, "prover_id": sector.ids.prover_id, "sector_id": sector.ids.sector_id});
    let body = json!({"circuit": "porep-2k", "input": input});
    let (status, accepted) = server.call("POST", "/v1/prove", Some(&body.to_string()));
    assert_eq!(status, 202, "{accepted}");
    let (status, _) = server.call("DELETE", accepted["status_url"].as_str().unwrap(), None);
    assert_eq!(status, 200);
}

/// The first 32-byte digest (an array of 32 numbers) in a C1 output's JSON.
fn first_digest(v: &mut Value) -> Option<&mut Vec<Value>> {
    match v {
        Value::Array(a) => {
            if a.len() == 32 && a.iter().all(Value::is_u64) {
                return Some(a);
            }
            a.iter_mut().find_map(first_digest)
        }
        Value::Object(o) => o.values_mut().find_map(first_digest),
        _ => None,
    }
}

/// Sectors sealed here are proved over HTTP, one at a time within a budget
/// of a key and one and a half partitions (the rest wait for room), and
/// filecoin-proofs' `verify_seal` accepts each proof, for its own sector only.
#[test]
fn sectors_are_proved_over_http_within_a_budget_and_verify_seal_accepts_them() {
    let f = fixture();
    // The fixture's load recorded the circuit's matrices beside the
    // parameters; the server reads them rather than recording them again.
    // (The cache is shared by the test binaries: this circuit's files are
    // found by its identifier.)
    let seal: filecoin_proofs_api::RegisteredSealProof = serde_json::from_value(json!(PROOF)).unwrap();
    let files = format!("v28-{}", seal.circuit_identifier().unwrap());
    let meta = f.params().join("provd-matrices").join(&files).join("meta.json");
    let recorded = std::fs::metadata(&meta).unwrap().modified().unwrap();
    let budget = f.resident + f.footprint * 3 / 2;
    let server = Server::start(&f.config(&format!("[pipeline]\nmemory_budget = {budget}\n")), &[]);
    assert_eq!(std::fs::metadata(&meta).unwrap().modified().unwrap(), recorded, "recorded again");
    let ids: Vec<String> = f
        .sectors
        .iter()
        .map(|s| {
            let body = json!({"circuit": "porep-2k", "input": s.input()});
            let (status, accepted) = server.call("POST", "/v1/prove", Some(&body.to_string()));
            assert_eq!(status, 202, "{accepted}");
            accepted["job_id"].as_str().unwrap().to_string()
        })
        .collect();
    let done = server.wait_all(&ids, JOBS_DEADLINE);
    for (id, sector) in ids.iter().zip(&f.sectors) {
        let job = &done[id];
        assert_eq!(job["state"], "succeeded", "{job}");
        let proof = seal_proof(job);
        assert_eq!(proof.len(), 192, "one partition's proof at 2 KiB");
        assert!(sector.verify(&proof).unwrap(), "sector {}", sector.ids.sector_id);
    }
    // One sector's proof is not another's.
    assert!(!f.sectors[1].verify(&seal_proof(&done[&ids[0]])).unwrap());
    // The verifying key served is the one in the parameter cache.
    let served = provd_e2e::request(server.addr, "GET", "/v1/circuits/porep-2k/verifying-key", None, &[]);
    assert_eq!(served.body, std::fs::read(f.params().join(format!("{files}.vk"))).unwrap());
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    assert_eq!(circuits["circuits"][0]["kind"], "filecoin-porep", "{circuits}");
    let peak = server.metric("provd_memory_reserved_peak_bytes");
    assert!(peak > f.resident as f64 && peak <= budget as f64, "reserved peaked at {peak}, budget {budget}");
    let (_, status) = server.call("GET", "/v1/status", None);
    let snap = &status["snapshot"];
    for class in ["synth", "abc", "aux", "density", "pending"] {
        assert_eq!(snap["buffers"][class], 0, "{class}: {snap}");
        assert_eq!(snap["buffer_bytes"][class], 0, "{class}: {snap}");
    }
    assert_eq!(snap["reserved_bytes"], snap["key_bytes"], "{snap}");
    assert_eq!(snap["budget_bytes"], budget, "{snap}");
}

/// Device memory a ballast leaves the server in the streamed-key test: a
/// small card's, with room for a streamed proof's working buffers.
const DEVICE_CAP: u64 = 3 << 30;

/// A real sector proved on the GPU with its key streamed from the host: the
/// card capped physically (a ballast holds all its memory but
/// [`DEVICE_CAP`]) and `gpu.key_memory_limit` below the key's size, so that
/// the key's queries stay in the host's page-locked memory and every MSM
/// reads them a chunk at a time. filecoin-proofs' `verify_seal` accepts the
/// proof, for its own sector only, and /v1/circuits names the device that
/// streams the key.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn gpu_a_sealed_sector_proves_with_its_key_streamed_on_a_capped_card() {
    let f = fixture();
    let data = tempfile::tempdir().unwrap();
    let ballast = match Beside::start_from(&provd_e2e::provd_bin(), DEVICE_CAP, data.path()) {
        Ok(b) => b,
        Err(e) if e.to_string().contains("no usable CUDA device") => {
            eprintln!("skipped: {}", e.to_string().lines().last().unwrap_or(""));
            return;
        }
        Err(e) => panic!("provd bench ballast failed: {e:#}"),
    };
    let config = f.config("[gpu]\nkey_memory_limit = 1048576\n");
    let server =
        Server::try_start(&config, &[], "cuda").expect("provd serve --backend cuda beside the ballast");
    let (status, job) = prove(&server, &f.sectors[0].input());
    assert_eq!((status, job["state"].as_str()), (202, Some("succeeded")), "{job}");
    let proof = seal_proof(&job);
    assert!(f.sectors[0].verify(&proof).unwrap(), "verify_seal accepts the streamed key's proof");
    assert!(!f.sectors[1].verify(&proof).unwrap(), "and only for its own sector");
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    let c = &circuits["circuits"][0];
    assert_eq!(c["srs_streamed_on"], json!(["cuda:0"]), "{circuits}");
    let key = c["srs_bytes"].as_u64().unwrap();
    assert!(key > 1048576, "the key ({key} bytes) is over the key memory limit");
    assert!(
        server.metric("provd_key_layout{circuit=\"porep-2k\",device=\"cuda:0\",layout=\"streamed\"}") == 1.0
    );
    println!("{}; key {} MiB streamed; the sector's proof verified", ballast.held, key >> 20);
}
