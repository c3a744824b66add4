//! The HTTP service end to end: the real binary on a loopback port.

use std::time::{Duration, Instant};

use provd::circuits::BenchCircuit;
use provd::groth16::{PointCheck, ProvingKey};
use provd_e2e::{partition_proof, raw_request, request, Server};
use serde_json::Value;

const CONFIG: &str = r#"
[server]
max_body_bytes = 4096
max_queued_partitions = 8
[[circuits]]
kind = "bench"
name = "bench-8"
[[circuits]]
kind = "bench"
name = "bench-12"
[pipeline]
partition_permits = 1
"#;

fn key(server: &Server, circuit: &str) -> ProvingKey {
    let path = server.data_dir.path().join("params").join(format!("{circuit}.v1.test-only.params"));
    ProvingKey::read_file(&path, PointCheck::Full).unwrap()
}

/// Every partition's proof verifies (with bellperson) against its public inputs.
fn verify(server: &Server, job: &Value) {
    let key = key(server, job["circuit"].as_str().unwrap());
    let parts = job["partitions"].as_array().unwrap();
    assert!(!parts.is_empty());
    for p in parts {
        let (proof, inputs) = partition_proof(p);
        assert!(proof.verify(&key.vk, &inputs), "proof of {p}");
    }
}

/// A /v1/prove body: one partition per seed.
fn job_body(circuit: &str, seeds: impl IntoIterator<Item = u64>) -> String {
    let parts: Vec<String> = seeds.into_iter().map(|s| format!(r#"{{"seed":{s}}}"#)).collect();
    format!(r#"{{"circuit":"{circuit}","partitions":[{}]}}"#, parts.join(","))
}

fn wait_for(server: &Server, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (code, job) = server.call("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(code, 200, "{job}");
        if job["state"] == state {
            return job;
        }
        assert!(
            !["succeeded", "failed", "cancelled"].contains(&job["state"].as_str().unwrap()),
            "ended {job}"
        );
        assert!(Instant::now() < deadline, "job {id} never reached {state}: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_idle(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, st) = server.call("GET", "/v1/status", None);
        let s = &st["snapshot"];
        let buffers_empty = s["buffers"].as_object().unwrap().values().all(|v| v == 0);
        // what stays reserved is the resident keys' share
        if buffers_empty && s["reserved_bytes"] == s["key_bytes"] && s["key_bytes"].as_u64() > Some(0) {
            return;
        }
        assert!(Instant::now() < deadline, "buffers still held: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn submit_poll_fetch_and_verify() {
    let server = Server::start(CONFIG, &[]);
    let (code, body) = server.call(
        "POST",
        "/v1/prove",
        Some(r#"{"circuit":"bench-8","partitions":[{"seed":1},{"seed":2}]}"#),
    );
    assert_eq!(code, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_string();
    let job = wait_for(&server, &id, "succeeded");
    verify(&server, &job);
    for p in job["partitions"].as_array().unwrap() {
        assert_eq!(p["stage"], "done");
        for stage in ["synthesis", "gpu_queue", "prove_start", "prove_finish"] {
            assert!(p["seconds"][stage].as_f64().is_some(), "{stage} timing in {p}");
        }
    }
    // ?wait=true answers with the finished job; the client's claimed public
    // inputs are honoured when right.
    let claims = &job["partitions"][0]["public_inputs"];
    let body = format!(r#"{{"circuit":"bench-8","partitions":[{{"seed":1,"public_inputs":{claims}}}]}}"#);
    let (code, done) = server.call("POST", "/v1/prove?wait=true", Some(&body));
    assert_eq!((code, done["state"].as_str()), (200, Some("succeeded")), "{done}");
    verify(&server, &done);
    // circuits and status
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    assert_eq!(circuits["circuits"][0]["name"], "bench-12");
    assert!(circuits["circuits"][1]["srs_bytes"].as_u64().unwrap() > 0);
    let (_, status) = server.call("GET", "/v1/status", None);
    assert_eq!(status["snapshot"]["partitions_completed"], 3, "{status}");
    assert_idle(&server);
}

#[test]
fn cancel_mid_job_releases_its_buffers() {
    let server = Server::start(CONFIG, &[]);
    let (code, r) = server.call("POST", "/v1/prove", Some(&job_body("bench-12", 0..8)));
    assert_eq!(code, 202, "{r}");
    let id = r["job_id"].as_str().unwrap().to_string();
    wait_for(&server, &id, "running");
    let (code, job) = server.call("DELETE", &format!("/v1/jobs/{id}"), None);
    assert_eq!(code, 200, "{job}");
    let job = wait_for(&server, &id, "cancelled");
    assert!(job["partitions"].as_array().unwrap().iter().any(|p| p["stage"] == "cancelled"), "{job}");
    assert_idle(&server);
    let (code, _) = server.call("DELETE", "/v1/jobs/424242", None);
    assert_eq!(code, 404);
}

#[test]
fn bad_input_gets_a_clear_4xx() {
    let server = Server::start(CONFIG, &[]);
    let cases: &[(&str, u16, &str)] = &[
        ("{not json", 400, "invalid request"),
        (
            r#"{"circuit":"bench-99","partitions":[{"seed":1}]}"#,
            400,
            "unknown circuit 'bench-99'; this worker serves: bench-12, bench-8",
        ),
        (r#"{"circuit":"bench-8","partitions":[]}"#, 400, "at least one witness"),
        (r#"{"circuit":"bench-8","partitions":[{"sed":1}]}"#, 400, "unknown field `sed`"),
        (
            r#"{"circuit":"bench-8","partitions":[{"seed":1,"public_inputs":["0x1"]}]}"#,
            400,
            "partition 0: 1 public inputs given, the circuit has 4",
        ),
        (
            r#"{"circuit":"bench-8","partitions":[{"seed":1,"public_inputs":["0x1","2","x","4"]}]}"#,
            400,
            "public_inputs[2]",
        ),
    ];
    for (body, code, message) in cases {
        let (got, r) = server.call("POST", "/v1/prove", Some(body));
        assert_eq!(got, *code, "{body}: {r}");
        assert!(r["error"].as_str().unwrap().contains(message), "{body}: {r}");
    }
    // too large
    let big = job_body("bench-8", [1; 500]);
    let (code, r) = server.call("POST", "/v1/prove", Some(&big));
    assert_eq!(code, 413, "{r}");
    assert!(r["error"].as_str().unwrap().contains("max_body_bytes"), "{r}");
    // unknown job, unknown route
    assert_eq!(server.call("GET", "/v1/jobs/77", None).0, 404);
    assert_eq!(server.call("GET", "/v1/jobs/x", None).0, 404);
    assert_eq!(server.call("GET", "/v2/nothing", None).0, 404);
    // a wrong claimed public input: the job fails, naming the constraint
    let body = r#"{"circuit":"bench-8","partitions":[{"seed":1,"public_inputs":["1","2","3","4"]}]}"#;
    let (code, job) = server.call("POST", "/v1/prove?wait=true", Some(body));
    assert_eq!((code, job["state"].as_str()), (200, Some("failed")), "{job}");
    assert!(
        job["error"].as_str().unwrap().contains("partition 0: witness does not satisfy constraint"),
        "{job}"
    );
    assert!(job["error"].as_str().unwrap().contains("'out0'"), "{job}");
    // Queue full: one permit, a job of 8 (the limit), then 8 more → 429 with
    // Retry-After. Any partition still waiting makes it full; with one permit
    // and a bounded GPU queue only a few can leave before a proof finishes
    // (a job of 6 then 6 more raced: under CI load two had left once).
    let eight = job_body("bench-12", [3; 8]);
    assert_eq!(server.call("POST", "/v1/prove", Some(&eight)).0, 202);
    let (code, head, body) = raw_request(server.addr, "POST", "/v1/prove", Some(&eight), &[]);
    assert_eq!(code, 429, "{body}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 5"), "{head}");
    // nothing a client sent crashed the process
    assert_eq!(server.call("GET", "/healthz", None).0, 200);
}

#[test]
fn bearer_token_auth() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let config = format!(
        "[server]\nauth_token_file = {:?}\n[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n",
        token_file
    );
    let server = Server::start(&config, &[]);
    let job = r#"{"circuit":"bench-8","partitions":[{"seed":1}]}"#;
    let (code, r) = server.call("POST", "/v1/prove", Some(job));
    assert_eq!(code, 401, "{r}");
    assert!(r["error"].as_str().unwrap().contains("Bearer"));
    assert_eq!(server.call_with("GET", "/v1/status", None, &[("Authorization", "Bearer wrong")]).0, 401);
    assert_eq!(
        server.call_with("GET", "/metrics", None, &[("Authorization", "Bearer s3cret-tokenX")]).0,
        401
    );
    let (code, r) = server.call_with(
        "POST",
        "/v1/prove?wait=true",
        Some(job),
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!((code, r["state"].as_str()), (200, Some("succeeded")), "{r}");
    assert_eq!(server.call("GET", "/healthz", None).0, 200, "health needs no token");
    assert!(!server.stderr().contains("s3cret"), "the token is never logged");
    // and from the environment, with auth off in the file
    let server = Server::start(
        "[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n",
        &[("PROVD_AUTH_TOKEN", "envtoken")],
    );
    assert_eq!(server.call("GET", "/v1/circuits", None).0, 401);
    assert_eq!(server.call_with("GET", "/v1/circuits", None, &[("Authorization", "Bearer envtoken")]).0, 200);
}

#[test]
fn sigterm_finishes_accepted_jobs_and_exits_zero() {
    let mut server = Server::start(CONFIG, &[]);
    let (code, _) = server.call("POST", "/v1/prove", Some(&job_body("bench-12", 0..3)));
    assert_eq!(code, 202);
    std::process::Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "provd did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}; stderr:\n{}", server.stderr());
    std::thread::sleep(Duration::from_millis(100));
    let log = server.stderr();
    assert!(log.contains("accepted jobs ended done=1 cancelled=0"), "{log}");
    assert!(log.contains("outcome=\"succeeded\""), "{log}");
}

#[test]
fn events_stream_and_metrics_scrape() {
    let server = Server::start(CONFIG, &[]);
    let (code, _) = server.call(
        "POST",
        "/v1/prove?wait=true",
        Some(r#"{"circuit":"bench-8","partitions":[{"seed":9}]}"#),
    );
    assert_eq!(code, 200);
    // SSE: the history event first, then snapshots once a second.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.addr).unwrap();
    write!(s, "GET /v1/events HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: snapshot") && Instant::now() < deadline {
        let mut buf = [0u8; 8192];
        if let Ok(n) = s.read(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    assert!(seen.contains("event: history"), "{seen}");
    assert!(seen.contains("event: snapshot") && seen.contains("\"partitions_completed\":1"), "{seen}");
    // The snapshot carries the recent jobs without their proofs.
    let data =
        seen.split("event: snapshot").nth(1).and_then(|e| e.lines().find_map(|l| l.strip_prefix("data: ")));
    let snapshot: serde_json::Value = serde_json::from_str(data.expect("snapshot data")).unwrap();
    let part = &snapshot["jobs"][0]["partitions"][0];
    assert_eq!(part["stage"], "done", "{snapshot}");
    assert!(part.get("proof").is_none() && part.get("public_inputs").is_none(), "{snapshot}");
    // /metrics passes promtool when it is installed (CI installs it).
    let (code, head, text) = raw_request(server.addr, "GET", "/metrics", None, &[]);
    assert_eq!(code, 200);
    assert!(head.contains("text/plain"), "{head}");
    assert!(text.contains("provd_partitions_total{circuit=\"bench-8\",outcome=\"succeeded\"} 1"), "{text}");
    assert!(text.contains("provd_srs_bytes{circuit=\"bench-8\",location=\"host\"}"), "{text}");
    provd::telemetry::metrics::assert_promtool_accepts(&text);
    let (code, r) = server.call("GET", "/readyz", None);
    assert_eq!((code, r["ready"].as_bool()), (200, Some(true)), "{r}");
}

/// A user's own key: bellperson's generate_random_parameters, written with
/// Parameters::write to a file the config names. Jobs prove through HTTP, and
/// the proofs verify with bellperson against the key from GET .../verifying-key;
/// `provd vk export` writes the same bytes and `provd verify` agrees.
#[test]
fn a_users_bellperson_key_proves_and_verifies_against_the_served_key() {
    use bellperson::groth16 as bp;
    let dir = tempfile::tempdir().unwrap();
    let params = bp::generate_random_parameters::<blstrs::Bls12, _, _>(
        BenchCircuit::new(8, 4, None),
        &mut rand::rngs::OsRng,
    )
    .unwrap();
    let key_path = dir.path().join("mine.params");
    params.write(std::fs::File::create(&key_path).unwrap()).unwrap();
    let config = format!(
        "[[circuits]]\nkind = \"bench\"\nname = \"mine\"\nlog_size = 8\nparams = {:?}\n",
        key_path.display().to_string()
    );
    let server = Server::start(&config, &[]);
    let (code, job) = server.call("POST", "/v1/prove?wait=true", Some(&job_body("mine", [1, 2, 3])));
    assert_eq!((code, job["state"].as_str()), (200, Some("succeeded")), "{job}");

    let vk = request(server.addr, "GET", "/v1/circuits/mine/verifying-key", None, &[]);
    assert_eq!(vk.status, 200);
    assert!(vk.head.contains("application/octet-stream"), "{}", vk.head);
    let served = bp::VerifyingKey::<blstrs::Bls12>::read(&vk.body[..]).unwrap();
    assert!(served == params.vk, "the served verifying key is the user's");
    let pvk = bp::prepare_verifying_key(&served);
    for p in job["partitions"].as_array().unwrap() {
        let (proof, inputs) = partition_proof(p);
        assert!(bp::verify_proof(&pvk, &proof.to_bellperson(), &inputs).unwrap(), "bellperson verifies {p}");
    }
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    let c = &circuits["circuits"][0];
    assert_eq!((c["kind"].as_str(), c["key"]["source"].as_str()), (Some("bench"), Some("file")), "{c}");
    assert_eq!(c["verifying_key_encodings"][0], "bellperson");
    // unknown circuit, unknown encoding
    let r = request(server.addr, "GET", "/v1/circuits/nope/verifying-key", None, &[]);
    assert_eq!(r.status, 404);
    let (code, r) = server.call("GET", "/v1/circuits/mine/verifying-key?encoding=pem", None);
    assert_eq!(code, 400, "{r}");
    assert!(r["error"].as_str().unwrap().contains("unknown verifying key encoding 'pem'"), "{r}");

    // The command line: export, then verify a proof and a tampered claim.
    let config_path = server.data_dir.path().join("provd.toml");
    let out = dir.path().join("mine.vk");
    let o = provd_e2e::provd(
        server.data_dir.path(),
        &[
            "vk",
            "export",
            "--config",
            config_path.to_str().unwrap(),
            "--circuit",
            "mine",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{:?}", provd_e2e::text(&o));
    assert_eq!(std::fs::read(&out).unwrap(), vk.body);
    let p = &job["partitions"][0];
    let proof_file = dir.path().join("proof.hex");
    std::fs::write(&proof_file, p["proof"].as_str().unwrap()).unwrap();
    let public_file = dir.path().join("public.json");
    std::fs::write(&public_file, p["public_inputs"].to_string()).unwrap();
    let args = [
        "verify",
        "--vk",
        out.to_str().unwrap(),
        "--proof",
        proof_file.to_str().unwrap(),
        "--public",
        public_file.to_str().unwrap(),
    ];
    let o = provd_e2e::provd(dir.path(), &args);
    assert_eq!((o.status.code(), provd_e2e::text(&o).0.trim()), (Some(0), "valid"));
    let mut wrong: Vec<String> = serde_json::from_value(p["public_inputs"].clone()).unwrap();
    wrong[0] = "7".into();
    std::fs::write(&public_file, serde_json::to_string(&wrong).unwrap()).unwrap();
    let o = provd_e2e::provd(dir.path(), &args);
    assert_eq!(o.status.code(), Some(1), "{:?}", provd_e2e::text(&o));
    assert!(provd_e2e::text(&o).0.contains("invalid: the proof fails the pairing check"));
    std::fs::write(&public_file, "[\"0x1\"]").unwrap();
    let o = provd_e2e::provd(dir.path(), &args);
    assert_eq!(o.status.code(), Some(1));
    assert!(provd_e2e::text(&o).0.contains("1 public inputs given, the verifying key has 4"));
    std::fs::write(&proof_file, "not a proof").unwrap();
    let o = provd_e2e::provd(dir.path(), &args);
    assert_eq!(o.status.code(), Some(2), "unreadable input is exit 2");

    // A key made for another circuit is refused at start-up, naming the file.
    let wrong_size = dir.path().join("wrong.params");
    bp::generate_random_parameters::<blstrs::Bls12, _, _>(
        BenchCircuit::new(9, 4, None),
        &mut rand::rngs::OsRng,
    )
    .unwrap()
    .write(std::fs::File::create(&wrong_size).unwrap())
    .unwrap();
    let config = format!(
        "[[circuits]]\nkind = \"bench\"\nname = \"mine\"\nlog_size = 8\nparams = {:?}\n",
        wrong_size.display().to_string()
    );
    let err = Server::try_start(&config, &[], "cpu").err().expect("refused");
    assert!(err.contains("was made for another circuit") && err.contains("wrong.params"), "{err}");
}
