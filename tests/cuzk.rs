//! Curio's door: the cuzk.v1 gRPC protocol end to end. A client written in
//! Python from provd's own .proto (tests/cuzk/client.py, grpcio) drives the
//! real binary over TCP and over a unix socket with what Curio sends: a
//! 2 KiB sector's C1 output in Curio's JSON envelope, WinningPoSt and
//! WindowPoSt vanilla proofs as filecoin-proofs-api encodes them, and a
//! SnapDeals update. Every proof is checked with filecoin-proofs-api's own
//! verifiers; refusals, retries, cancels, timeouts, the status counts, the
//! metrics and a kill -9 are checked as Curio would meet them.

use std::sync::OnceLock;

use base64::Engine as _;
use filecoin_proofs_api::post::{
    generate_winning_post_sector_challenge, verify_window_post, verify_winning_post,
};
use filecoin_proofs_api::{
    PublicReplicaInfo, RegisteredPoStProof, RegisteredSealProof, RegisteredUpdateProof, SectorId,
};
use provd::circuits::filecoin::seal::{
    post_vanilla_proofs, seal_sector, update_sector, SealedSector, UpdatedSector,
};
use provd::circuits::filecoin::{Ids, Registered};
use provd_e2e::{cuzk_client, Server, SharedParameters};
use serde_json::{json, Value};

const SEAL: RegisteredSealProof = RegisteredSealProof::StackedDrg2KiBV1_1;
const UPDATE: RegisteredUpdateProof = RegisteredUpdateProof::StackedDrg2KiBV1;
const WINNING: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWinning2KiBV1;
const WINDOW: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
/// The same proof types as Go's abi numbers them (what Curio sends).
const SEAL_NUMBER: u64 = 5;
const UPDATE_NUMBER: u64 = 0;
const WINNING_NUMBER: u64 = 0;
/// Go's StackedDrgWindow2KiBV1_1.
const WINDOW_NUMBER: u64 = 10;
const MINER: u64 = 1000;
const SECTOR_SIZE: u64 = 2048;

struct Fixture {
    dir: tempfile::TempDir,
    params: std::path::PathBuf,
    /// Sectors 1 and 2, then 4, 5 and 6 (a deadline's other partitions),
    /// sealed; 1's C1 output is proved.
    sectors: Vec<(SealedSector, std::path::PathBuf)>,
    /// Sector 3, sealed then updated with new data.
    update: UpdatedSector,
}

impl Fixture {
    /// A server's config: the four circuits, the gRPC door on a loopback
    /// port and on a unix socket, and `extra` TOML.
    fn config(&self, socket: &std::path::Path, extra: &str) -> String {
        let entry = |kind: &str, name: &str, proof: String| {
            format!(
                "[[circuits]]\nkind = \"{kind}\"\nname = \"{name}\"\nproof = \"{proof}\"\n\
                 parameter_cache = \"{}\"\ntest_only_parameters = true\n",
                self.params.display()
            )
        };
        entry("filecoin-porep", "porep-2k", format!("{SEAL:?}"))
            + &entry("filecoin-winning-post", "winning-2k", format!("{WINNING:?}"))
            + &entry("filecoin-window-post", "window-2k", format!("{WINDOW:?}"))
            + &entry("filecoin-snap", "snap-2k", format!("{UPDATE:?}"))
            + &format!("[grpc]\nlisten = [\"127.0.0.1:0\", \"unix://{}\"]\n{extra}", socket.display())
    }

    fn c1_file(&self) -> std::path::PathBuf {
        let path = self.dir.path().join("c1.json");
        std::fs::write(&path, &self.sectors[0].0.c1_json).unwrap();
        path
    }

    fn vanilla(&self, proof: RegisteredPoStProof, randomness: [u8; 32], ids: &[u64]) -> Vec<Vec<u8>> {
        let sectors: Vec<_> = ids
            .iter()
            .map(|&i| self.sectors.iter().find(|(s, _)| s.ids.sector_id == i).unwrap())
            .map(|(s, at)| (s, at.as_path()))
            .collect();
        post_vanilla_proofs(proof, &sectors, randomness).unwrap()
    }

    fn public(
        &self,
        proof: RegisteredPoStProof,
        ids: &[u64],
    ) -> std::collections::BTreeMap<SectorId, PublicReplicaInfo> {
        ids.iter()
            .map(|&i| {
                let (s, _) = self.sectors.iter().find(|(s, _)| s.ids.sector_id == i).unwrap();
                (SectorId::from(i), PublicReplicaInfo::new(proof, s.comm_r))
            })
            .collect()
    }
}

/// Seals the sectors once; the four circuits' TEST-ONLY parameters come
/// from the cache the test binaries share (generated here if this is the
/// first to need them).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedParameters::hold();
        // filecoin-proofs reads these once, when first used: before any sealing.
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &shared.dir);
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", dir.path().join("parents"));
        let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
        let seal = |sector_id: u64| {
            let at = dir.path().join(format!("sector-{sector_id}"));
            (seal_sector(SEAL, Ids { prover_id, sector_id }, &at, sector_id).unwrap(), at)
        };
        let sectors = vec![seal(1), seal(2), seal(4), seal(5), seal(6)];
        let (key, at) = seal(3);
        let update = update_sector(&key, &at, 3).unwrap();
        for proof in [
            Registered::Seal(SEAL),
            Registered::WinningPost(WINNING),
            Registered::WindowPost(WINDOW),
            Registered::Update(UPDATE),
        ] {
            shared.load(proof);
        }
        Fixture { params: shared.dir.clone(), dir, sectors, update }
    })
}

/// Chain randomness: a field element's 32 bytes.
fn randomness(seed: u8) -> [u8; 32] {
    let mut r = [seed; 32];
    r[31] &= 0x3f;
    r
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A PoRep C2 request as Curio's PoRepSnarkCuzk makes it; the client wraps
/// the C1 output in Curio's envelope.
fn porep(f: &Fixture, request_id: &str) -> Value {
    json!({
        "request_id": request_id, "proof_kind": "POREP_SEAL_COMMIT", "sector_size": SECTOR_SIZE,
        "registered_proof": SEAL_NUMBER, "priority": "NORMAL", "sector_number": 1, "miner_id": MINER,
        "vanilla_proof": {"curio_c1": {"c1_json_file": f.c1_file(), "sector": 1, "sector_size": SECTOR_SIZE}},
    })
}

/// A WindowPoSt partition as Curio's WindowPoStCuzk makes it.
fn window(vanilla: &[Vec<u8>], r: [u8; 32], request_id: &str) -> Value {
    json!({
        "request_id": request_id, "proof_kind": "WINDOW_POST_PARTITION", "sector_size": SECTOR_SIZE,
        "registered_proof": WINDOW_NUMBER, "priority": "HIGH", "miner_id": MINER,
        "vanilla_proofs": vanilla.iter().map(|v| b64(v)).collect::<Vec<_>>(), "randomness": b64(&r),
        "partition_index": 0,
    })
}

/// One call of a plan.
fn call(name: &str, target: &str, request: Value) -> Value {
    json!({"call": name, "target": target, "request": request})
}

/// A call's response, or the call and its error.
fn ok(result: &Value) -> &Value {
    result.get("ok").unwrap_or_else(|| panic!("the call failed: {result}"))
}

/// The job id of a successful SubmitProof (or Prove) answer.
fn job_id(result: &Value) -> String {
    ok(result)["job_id"].as_str().unwrap().to_string()
}

fn error(result: &Value) -> (&str, &str) {
    let e = result.get("error").unwrap_or_else(|| panic!("the call succeeded: {result}"));
    (e["code"].as_str().unwrap(), e["message"].as_str().unwrap())
}

/// A finished call's proof bytes (its status COMPLETED).
fn proof(result: &Value) -> Vec<u8> {
    assert_eq!(result["status"], "COMPLETED", "{result}");
    base64::engine::general_purpose::STANDARD.decode(result["proof"].as_str().unwrap()).unwrap()
}

#[test]
fn curios_requests_over_tcp_and_a_unix_socket_are_proved_and_verified() {
    let f = fixture();
    let socket = f.dir.path().join("cuzk-a.sock");
    let server = Server::start(&f.config(&socket, ""), &[]);
    let (tcp, unix) = (server.grpc[0].clone(), server.grpc[1].clone());
    assert_eq!(unix, format!("unix://{}", socket.display()));
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
    let r = randomness(7);
    let elected = generate_winning_post_sector_challenge(WINNING, &r, 2, prover_id).unwrap();
    let winner = f.sectors[elected[0] as usize].0.ids.sector_id;
    let winning = json!({
        "request_id": "winpost-1000-0707", "proof_kind": "WINNING_POST", "sector_size": SECTOR_SIZE,
        "registered_proof": WINNING_NUMBER, "priority": "CRITICAL", "miner_id": MINER,
        "vanilla_proofs": f.vanilla(WINNING, r, &[winner]).iter().map(|v| b64(v)).collect::<Vec<_>>(),
        "randomness": b64(&r),
    });
    let w = randomness(9);
    let window_vanilla = f.vanilla(WINDOW, w, &[1, 2]);
    let u = &f.update;
    let snap = json!({
        "request_id": "snap-1000-3", "proof_kind": "SNAP_DEALS_UPDATE", "sector_size": SECTOR_SIZE,
        "registered_proof": UPDATE_NUMBER, "priority": "NORMAL", "sector_number": 3, "miner_id": MINER,
        "vanilla_proofs": u.vanilla.iter().map(|v| b64(v)).collect::<Vec<_>>(),
        "comm_r_old": b64(&u.comm_r_old), "comm_r_new": b64(&u.comm_r_new), "comm_d_new": b64(&u.comm_d_new),
    });
    // Malformed payloads: each refused with a status that names the cause,
    // and no job made.
    let bad_base64 = br#"{"SectorNum":1,"Phase1Out":"not*base64!","SectorSize":2048}"#;
    let mut truncated = window_vanilla.clone();
    let half = truncated[0].len() / 2;
    truncated[0].truncate(half);
    let wrong_kind = json!({"request_id": "x", "proof_kind": "WINNING_POST", "registered_proof": WINDOW_NUMBER,
                            "miner_id": MINER, "randomness": b64(&r)});
    let not_served = json!({"request_id": "y", "proof_kind": "POREP_SEAL_COMMIT", "registered_proof": 8,
                            "miner_id": MINER});
    let Some(results) = cuzk_client(&json!([
        call("Prove", &tcp, json!({"submit": porep(f, "porep-1000-1")})),
        call("Prove", &unix, json!({"submit": winning})),
        call("Prove", &tcp, json!({"submit": window(&window_vanilla, w, "wdpost-1000-0-[9 9 9 9 9 9 9 9]")})),
        call("Prove", &unix, json!({"submit": snap})),
        // Curio retrying the sector: the same job.
        call("SubmitProof", &unix, porep(f, "porep-1000-1")),
        call(
            "SubmitProof",
            &tcp,
            json!({"request_id": "porep-1000-9", "proof_kind": "POREP_SEAL_COMMIT",
            "registered_proof": SEAL_NUMBER, "miner_id": MINER, "vanilla_proof": b64(bad_base64)})
        ),
        call("SubmitProof", &tcp, window(&truncated, w, "wdpost-truncated")),
        call("SubmitProof", &unix, wrong_kind),
        call("SubmitProof", &tcp, not_served),
        call("GetMetrics", &unix, json!({})),
        call("PreloadSRS", &tcp, json!({"circuit_id": "porep-2k"})),
        call("EvictSRS", &tcp, json!({"circuit_id": "wpost-2k"})),
        call("EvictSRS", &tcp, json!({"circuit_id": "porep-32g"})),
    ])) else {
        return;
    };

    // Every proof, exactly as filecoin-proofs-api's functions return it,
    // accepted by its verifiers.
    let sealed = ok(&results[0])["result"].clone();
    assert!(f.sectors[0].0.verify(&proof(&sealed)).unwrap(), "verify_seal");
    let won = proof(&ok(&results[1])["result"]);
    assert!(
        verify_winning_post(&r, &won, &f.public(WINNING, &[winner]), prover_id).unwrap(),
        "verify_winning_post"
    );
    let windowed = proof(&ok(&results[2])["result"]);
    assert!(
        verify_window_post(&w, &[(WINDOW, &windowed)], &f.public(WINDOW, &[1, 2]), prover_id).unwrap(),
        "verify_window_post"
    );
    assert!(u.verify(&proof(&ok(&results[3])["result"])).unwrap(), "verify_empty_sector_update_proof");
    // Timing in every result: the total covers its parts.
    let ms = |v: &Value| v.as_str().map_or_else(|| v.as_u64().unwrap(), |s| s.parse().unwrap());
    for (i, r) in results[..4].iter().enumerate() {
        let r = &ok(r)["result"];
        let parts = ms(&r["queue_wait_ms"]) + ms(&r["synthesis_ms"]);
        assert!(ms(&r["total_ms"]) > 0 && parts <= ms(&r["total_ms"]) + 1, "call {i}: {r}");
        assert!(ms(&r["synthesis_ms"]) > 0 && ms(&r["gpu_compute_ms"]) > 0, "call {i}: {r}");
    }
    assert_eq!(ok(&results[4])["job_id"], sealed["job_id"], "the same request_id is the same job");

    let refusals = [
        (&results[5], "INVALID_ARGUMENT", "base64"),
        (&results[6], "INVALID_ARGUMENT", "vanilla proof"),
        (&results[7], "INVALID_ARGUMENT", "a WindowPoSt proof, but proof_kind is WINNING_POST"),
        (&results[8], "NOT_FOUND", "no circuit served here proves StackedDrg32GiBV1_1"),
    ];
    for (result, code, says) in refusals {
        let (got, message) = error(result);
        assert_eq!(got, code, "{message}");
        assert!(message.contains(says), "wanted '{says}' in: {message}");
    }
    let text = ok(&results[9])["prometheus_text"].as_str().unwrap().to_string();
    assert!(text.contains("provd_requests_total{answer=\"refused\",door=\"grpc\"} 4"), "{text}");
    assert!(text.contains("provd_requests_total{answer=\"accepted\",door=\"grpc\"} 4"), "{text}");
    assert!(text.contains("provd_requests_total{answer=\"replayed\",door=\"grpc\"} 1"), "{text}");
    provd::telemetry::metrics::assert_promtool_accepts(&text);
    assert_eq!(ok(&results[10])["already_loaded"], true);
    assert_eq!(ok(&results[11])["was_loaded"], false, "nothing is on a device on the CPU backend");
    assert_eq!(error(&results[12]).0, "NOT_FOUND");

    // The jobs are the same jobs as HTTP's, marked with their door.
    let (status, job) = server.call("GET", &format!("/v1/jobs/{}", sealed["job_id"].as_str().unwrap()), None);
    assert_eq!(
        (status, job["door"].as_str(), job["state"].as_str()),
        (200, Some("grpc"), Some("succeeded")),
        "{job}"
    );
}

/// Jobs behind a long one: `GetStatus` counts them as `/v1/status` does;
/// `AwaitProof` with a timeout answers TIMEOUT; a cancel ends the long one
/// (CANCELLED) and the rest are proved.
#[test]
fn waits_time_out_cancels_end_jobs_and_the_status_counts_match_http() {
    let f = fixture();
    let socket = f.dir.path().join("cuzk-b.sock");
    // One partition at a time: the PoSt jobs wait for the sector's to leave synthesis.
    let server = Server::start(&f.config(&socket, "[pipeline]\npartition_permits = 1\n"), &[]);
    let tcp = server.grpc[0].clone();
    let Some(first) = cuzk_client(&json!([call("SubmitProof", &tcp, porep(f, "porep-1000-1"))])) else {
        return;
    };
    let sector_job = job_id(&first[0]);
    // Its partition started (synthesis), so the PoSt jobs wait behind it.
    let deadline = std::time::Instant::now() + provd_e2e::JOBS_DEADLINE;
    while server.call("GET", &format!("/v1/jobs/{sector_job}"), None).1["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "the sector's job never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let w = randomness(11);
    let vanilla = f.vanilla(WINDOW, w, &[1, 2]);
    let queued = cuzk_client(&json!([
        call("SubmitProof", &tcp, window(&vanilla, w, "wdpost-a")),
        call("SubmitProof", &tcp, window(&vanilla, w, "wdpost-b")),
        call("AwaitProof", &tcp, json!({"job_id": sector_job, "timeout_ms": 200})),
    ]))
    .unwrap();
    let waited = ok(&queued[2]);
    assert_eq!(
        (waited["status"].as_str(), waited["job_id"].as_str()),
        (Some("TIMEOUT"), Some(sector_job.as_str()))
    );

    // GetStatus counts what /v1/status counts. The PoSt jobs start as soon as
    // the sector's partition has left synthesis, which may fall between two
    // calls; so the counts are compared at a moment when /v1/status read the
    // same before and after GetStatus.
    const KINDS: [(&str, &str); 4] = [
        ("porep-c2", "porep-2k"),
        ("window-post", "window-2k"),
        ("winning-post", "winning-2k"),
        ("snap-update", "snap-2k"),
    ];
    let http_counts = || {
        let (_, http) = server.call("GET", "/v1/status", None);
        let jobs = &http["snapshot"]["unfinished_jobs"];
        let counts = KINDS.map(|(_, name)| {
            (jobs[name]["queued"].as_u64().unwrap(), jobs[name]["running"].as_u64().unwrap())
        });
        (counts, http)
    };
    let (status, counts, http) = loop {
        let (before, _) = http_counts();
        let status = ok(&cuzk_client(&json!([call("GetStatus", &tcp, json!({}))])).unwrap()[0]).clone();
        let (after, http) = http_counts();
        if before == after {
            break (status, after, http);
        }
        assert!(std::time::Instant::now() < deadline, "/v1/status never held still across a GetStatus");
    };
    let grpc_counts = KINDS.map(|(kind, _)| {
        let queues = status["queues"].as_array().unwrap();
        let q = queues.iter().find(|q| q["proof_kind"] == kind).unwrap();
        (q["pending"].as_u64().unwrap(), q["in_progress"].as_u64().unwrap())
    });
    assert_eq!(grpc_counts, counts, "GetStatus: {status}\n/v1/status: {http}");
    // The sector is still being proved, and neither PoSt has ended behind it.
    let [porep, (pending, in_progress), ..] = counts;
    assert_eq!((porep, pending + in_progress), ((0, 1), 2), "/v1/status: {http}");
    assert_eq!(&counts[2..], &[(0, 0), (0, 0)], "/v1/status: {http}");
    let srs = status["loaded_srs"].as_array().unwrap();
    let porep_srs = srs.iter().find(|s| s["circuit_id"] == "porep-2k").unwrap();
    assert_eq!(
        (porep_srs["tier"].as_str(), porep_srs["ref_count"].as_u64()),
        (Some("WARM"), Some(1)),
        "{status}"
    );
    let budget = http["snapshot"]["budget_bytes"].as_u64().unwrap();
    assert_eq!(status["pinned_memory_limit_bytes"].as_str().unwrap().parse::<u64>().unwrap(), budget);

    let posts: Vec<String> = queued[..2].iter().map(job_id).collect();
    let ended = cuzk_client(&json!([
        call("CancelProof", &tcp, json!({"job_id": sector_job})),
        call("AwaitProof", &tcp, json!({"job_id": sector_job})),
        call("AwaitProof", &tcp, json!({"job_id": posts[0]})),
        call("AwaitProof", &tcp, json!({"job_id": posts[1], "timeout_ms": 1_800_000})),
        call("CancelProof", &tcp, json!({"job_id": "0190e1c2-0000-7000-8000-000000000000"})),
        call("GetStatus", &tcp, json!({})),
    ]))
    .unwrap();
    assert_eq!(ok(&ended[0])["was_running"], true);
    assert_eq!(ok(&ended[1])["status"], "CANCELLED");
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
    for r in &ended[2..4] {
        let p = proof(ok(r));
        assert!(verify_window_post(&w, &[(WINDOW, &p)], &f.public(WINDOW, &[1, 2]), prover_id).unwrap());
    }
    assert_eq!(error(&ended[4]).0, "NOT_FOUND");
    let after = ok(&ended[5]);
    assert!(
        after["queues"].as_array().unwrap().iter().all(|q| q["pending"] == 0 && q["in_progress"] == 0),
        "{after}"
    );
    assert_eq!(after["total_proofs_completed"].as_str(), Some("2"), "{after}");
}

/// A kill -9 while gRPC jobs are in flight: after the restart, AwaitProof on
/// their ids returns their proofs (the journal covers this door too), and
/// Curio's retry of a Prove under the same request_id finds its job. One
/// partition at a time, so that the later of four WindowPoSt jobs are still
/// waiting when the worker is killed.
#[test]
fn after_a_kill_9_grpc_jobs_are_awaited_and_retried_to_their_proofs() {
    let f = fixture();
    let socket = f.dir.path().join("cuzk-c.sock");
    let config = f.config(&socket, "[pipeline]\npartition_permits = 1\n");
    let server = Server::start(&config, &[]);
    let tcp = server.grpc[0].clone();
    let w = randomness(13);
    let vanilla = f.vanilla(WINDOW, w, &[1, 2]);
    let request = |i: usize| window(&vanilla, w, &format!("wdpost-1000-{i}"));
    let plan: Vec<Value> = (0..4).map(|i| call("SubmitProof", &tcp, request(i))).collect();
    let Some(submitted) = cuzk_client(&json!(plan)) else {
        return;
    };
    let ids: Vec<String> = submitted.iter().map(job_id).collect();
    let (_, last) = server.call("GET", &format!("/v1/jobs/{}", ids[3]), None);
    assert!(matches!(last["state"].as_str(), Some("queued" | "running")), "in flight at the kill: {last}");
    let data_dir = server.kill_9();

    let server = Server::try_start_in(&config, &[], "cpu", data_dir).unwrap();
    let tcp = server.grpc[0].clone();
    let mut plan: Vec<Value> = ids.iter().map(|id| call("AwaitProof", &tcp, json!({"job_id": id}))).collect();
    plan.push(call("Prove", &tcp, json!({"submit": request(3)})));
    let after = cuzk_client(&json!(plan)).unwrap();
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
    for r in &after[..4] {
        let p = proof(ok(r));
        assert!(verify_window_post(&w, &[(WINDOW, &p)], &f.public(WINDOW, &[1, 2]), prover_id).unwrap());
    }
    let retried = &ok(&after[4])["result"];
    assert_eq!(retried["job_id"].as_str(), Some(ids[3].as_str()), "the retry found its job: {retried}");
    assert_eq!(proof(retried), proof(ok(&after[3])));
}

/// Off loopback over TCP the door takes the bearer token (and refuses to
/// start without one); a unix socket needs none.
#[test]
fn off_loopback_the_door_needs_the_token_and_a_unix_socket_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cuzk.sock");
    let config = format!(
        "[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n[grpc]\nlisten = [\"0.0.0.0:0\", \"unix://{}\"]\n",
        socket.display()
    );
    let refused = Server::try_start(&config, &[], "cpu").err().expect("no token: refused at start");
    assert!(refused.contains("(gRPC) (off loopback) with no bearer token"), "{refused}");
    let server = Server::start(&config, &[("PROVD_AUTH_TOKEN", "sesame")]);
    let second = Server::try_start(&config, &[("PROVD_AUTH_TOKEN", "sesame")], "cpu").err();
    let second = second.expect("a second worker on the same socket: refused");
    assert!(second.contains("is a socket another process answers on"), "{second}");
    let port = server.grpc[0].rsplit(':').next().unwrap();
    let tcp = format!("127.0.0.1:{port}");
    let status = |target: &str, token: Option<&str>| {
        let mut c = call("GetStatus", target, json!({}));
        if let Some(t) = token {
            c["token"] = json!(t);
        }
        c
    };
    let Some(results) = cuzk_client(&json!([
        status(&tcp, None),
        status(&tcp, Some("wrong")),
        status(&tcp, Some("sesame")),
        status(&server.grpc[1], None),
    ])) else {
        return;
    };
    for r in &results[..2] {
        let (code, message) = error(r);
        assert_eq!(code, "UNAUTHENTICATED", "{message}");
        assert!(message.contains("authorization: Bearer"), "{message}");
    }
    for r in &results[2..] {
        assert_eq!(ok(r)["queues"][0]["proof_kind"], "bench-8", "{r}");
    }
}

/// Curio's request ids, built as lib/ffi/cuzk_funcs.go builds them (Go's
/// `%d` of a byte slice is `[1 2 3]`, `%x` is hex).
mod curio_id {
    use super::MINER;

    /// `wdpost-<miner>-<partitionIdx>-<randomness[:8]>`: each WindowPoSt task
    /// proves one partition as partitionIdx 0, so the partitions of one
    /// deadline (one randomness) share it.
    pub fn window(randomness: &[u8; 32]) -> String {
        let bytes: Vec<String> = randomness[..8].iter().map(u8::to_string).collect();
        format!("wdpost-{MINER}-0-[{}]", bytes.join(" "))
    }

    /// `winpost-<miner>-<hex of randomness[:8]>`.
    pub fn winning(randomness: &[u8; 32]) -> String {
        format!("winpost-{MINER}-{}", hex::encode(&randomness[..8]))
    }

    /// `porep-<miner>-<sector>`.
    pub fn porep(sector: u64) -> String {
        format!("porep-{MINER}-{sector}")
    }
}

/// Curio's traffic as its own code sends it: the three WindowPoSt partitions
/// of one deadline under one request_id, at once (as its tasks run); a PoRep
/// sent again under its id, which re-attaches; a WinningPoSt into a queue that
/// normal work holds full (`max_queued_partitions` of them waiting), accepted
/// and proved in its lane. Every proof is checked by filecoin-proofs' own
/// verifiers, and the door refuses nothing.
#[test]
fn curios_shared_request_ids_and_a_full_queue_refuse_nothing() {
    let f = fixture();
    let socket = f.dir.path().join("cuzk-d.sock");
    // One partition at a time, room for three waiting in each class, and
    // for two proved partitions waiting for the prover.
    let extra =
        "[server]\nmax_queued_partitions = 3\n[pipeline]\npartition_permits = 1\ngpu_queue_capacity = 2\n";
    let server = Server::start(&f.config(&socket, extra), &[]);
    let tcp = server.grpc[0].clone();
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);

    // A deadline of three partitions: sectors 1 and 2, 4 and 5, and 6 alone.
    let w = randomness(21);
    let deadline: [&[u64]; 3] = [&[1, 2], &[4, 5], &[6]];
    let mut at_once: Vec<Value> = deadline
        .iter()
        .map(|sectors| {
            call(
                "Prove",
                &tcp,
                json!({"submit": window(&f.vanilla(WINDOW, w, sectors), w, &curio_id::window(&w))}),
            )
        })
        .collect();
    at_once.push(call("Prove", &tcp, json!({"submit": porep(f, &curio_id::porep(1))})));
    let Some(first) = cuzk_client(&json!([
        {"parallel": at_once},
        call("Prove", &tcp, json!({"submit": porep(f, &curio_id::porep(1))})),
    ])) else {
        return;
    };
    let together = first[0]["parallel"].as_array().unwrap();
    let mut jobs = std::collections::HashSet::new();
    for (sectors, result) in deadline.iter().zip(together) {
        let result = &ok(result)["result"];
        let p = proof(result);
        assert!(
            verify_window_post(&w, &[(WINDOW, &p)], &f.public(WINDOW, sectors), prover_id).unwrap(),
            "verify_window_post, sectors {sectors:?}"
        );
        jobs.insert(result["job_id"].as_str().unwrap().to_string());
    }
    assert_eq!(jobs.len(), 3, "a partition of its own job each: {together:?}");
    let sealed = &ok(&together[3])["result"];
    assert!(f.sectors[0].0.verify(&proof(sealed)).unwrap(), "verify_seal");
    let again = &ok(&first[1])["result"];
    assert_eq!(again["job_id"], sealed["job_id"], "the PoRep sent again re-attached to its job");
    assert_eq!(proof(again), proof(sealed));

    // Normal work holds the queue full, then the WinningPoSt comes. The
    // queue stays full only while the one permit is held: a sector's
    // synthesis (seconds) would hand it off before Curio's client is up,
    // so four sectors go first: one proving, two waiting for the prover
    // (its queue full), and the fourth synthesized and held at the
    // hand-off with the permit, for as long as the first one proves (tens
    // of seconds). Three more then wait in the queue of normal work, at its
    // bound. Should the prover free up before the client's calls anyway, a
    // round that did not find the queue full is waited out and played
    // again.
    let mut rounds = 0;
    let (full, r, winner) = loop {
        rounds += 1;
        let first =
            cuzk_client(&json!((0..3).map(|_| call("SubmitProof", &tcp, porep(f, ""))).collect::<Vec<_>>()))
                .unwrap();
        let mut normal: Vec<String> = first.iter().map(job_id).collect();
        let stages = |want: [u64; 3]| {
            let deadline = std::time::Instant::now() + provd_e2e::JOBS_DEADLINE;
            loop {
                let status = server.call("GET", "/v1/status", None).1;
                let at = |stage: &str| status["snapshot"]["stages"][stage].as_u64().unwrap_or(0);
                if [at("prove_start"), at("gpu_queue"), at("synthesis")] == want {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "never {want:?}: {status}");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        // One proving, two waiting for the prover, nothing in synthesis.
        stages([1, 2, 0]);
        let fourth = cuzk_client(&json!([call("SubmitProof", &tcp, porep(f, ""))])).unwrap();
        normal.push(job_id(&fourth[0]));
        // ... and the fourth synthesizing or held at the hand-off.
        stages([1, 2, 1]);
        // A round's own randomness: the same would re-attach to the last
        // round's WinningPoSt under its request id.
        let r = randomness(22 + rounds);
        let elected = generate_winning_post_sector_challenge(WINNING, &r, 2, prover_id).unwrap();
        let winner = f.sectors[elected[0] as usize].0.ids.sector_id;
        let winning = json!({
            "request_id": curio_id::winning(&r), "proof_kind": "WINNING_POST", "sector_size": SECTOR_SIZE,
            "registered_proof": WINNING_NUMBER, "priority": "CRITICAL", "miner_id": MINER,
            "vanilla_proofs": f.vanilla(WINNING, r, &[winner]).iter().map(|v| b64(v)).collect::<Vec<_>>(),
            "randomness": b64(&r),
        });
        let mut plan: Vec<Value> = (0..3).map(|_| call("SubmitProof", &tcp, porep(f, ""))).collect();
        plan.push(call("GetStatus", &tcp, json!({})));
        plan.push(call("Prove", &tcp, json!({"submit": winning})));
        plan.push(call("GetMetrics", &tcp, json!({})));
        let full = cuzk_client(&json!(plan)).unwrap();
        let status = ok(&full[3]);
        let porep_queue =
            status["queues"].as_array().unwrap().iter().find(|q| q["proof_kind"] == "porep-c2").unwrap();
        if porep_queue["pending"].as_u64() == Some(3) {
            break (full, r, winner);
        }
        assert!(
            rounds < 3,
            "normal work never held its queue full when the WinningPoSt came, in {rounds} rounds: {status}"
        );
        normal.extend(full[..3].iter().map(job_id));
        server.wait_all(&normal, provd_e2e::JOBS_DEADLINE);
    };
    let won = proof(&ok(&full[4])["result"]);
    assert!(
        verify_winning_post(&r, &won, &f.public(WINNING, &[winner]), prover_id).unwrap(),
        "verify_winning_post"
    );
    let text = ok(&full[5])["prometheus_text"].as_str().unwrap();
    let count = |answer: &str| {
        let series = format!("provd_requests_total{{answer=\"{answer}\",door=\"grpc\"}} ");
        text.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0, |v| v.parse::<u64>().unwrap())
    };
    // Four before the rounds (three WindowPoSt, a PoRep), eight a round
    // (seven sectors and the WinningPoSt).
    let accepted = 4 + 8 * u64::from(rounds);
    assert_eq!((count("refused"), count("accepted"), count("replayed")), (0, accepted, 1), "{text}");
}

/// Curio on another host: the nginx site docs/curio.md gives, taken from the
/// doc itself, between Curio's plaintext client (no token) and a provd that
/// needs the token off loopback. Through it a WindowPoSt is proved and
/// verified; straight to provd, the same call is refused.
#[test]
fn the_documented_proxy_adds_the_token_to_curios_plaintext_calls() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/curio.md")).unwrap();
    let site = doc
        .split("```nginx\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("docs/curio.md's nginx site");
    let f = fixture();
    let socket = f.dir.path().join("cuzk-e.sock");
    let config = f.config(&socket, "").replace("listen = [\"127.0.0.1:0\"", "listen = [\"0.0.0.0:0\"");
    let token = "proxy-sesame";
    let server = Server::start(&config, &[("PROVD_AUTH_TOKEN", token)]);
    let port = server.grpc[0].rsplit(':').next().unwrap();
    for placeholder in ["127.0.0.1:9820 http2", "prover-1.internal:9820", "<the token>"] {
        assert!(site.contains(placeholder), "the doc's site has {placeholder:?}: {site}");
    }
    let site = site
        .replace("127.0.0.1:9820 http2", "127.0.0.1:{port} http2")
        .replace("prover-1.internal:9820", &format!("127.0.0.1:{port}"))
        .replace("<the token>", token);
    let Some(proxy) = provd_e2e::Nginx::start(&site) else { return };
    let w = randomness(31);
    let request = json!({"submit": window(&f.vanilla(WINDOW, w, &[1, 2]), w, &curio_id::window(&w))});
    let Some(results) = cuzk_client(&json!([
        call("Prove", &format!("127.0.0.1:{}", proxy.port), request.clone()),
        call("Prove", &format!("127.0.0.1:{port}"), request),
    ])) else {
        return;
    };
    let through = results[0].get("ok").unwrap_or_else(|| panic!("{}; nginx: {}", results[0], proxy.log()));
    let prover_id = provd::circuits::filecoin::prover_id_of_miner(MINER);
    let p = proof(&through["result"]);
    assert!(verify_window_post(&w, &[(WINDOW, &p)], &f.public(WINDOW, &[1, 2]), prover_id).unwrap());
    let (code, message) = error(&results[1]);
    assert_eq!(code, "UNAUTHENTICATED", "{message}");
}
