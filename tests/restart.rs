//! Restarts lose nothing: a worker killed with SIGKILL in the middle of many
//! jobs and started again on the same data directory accounts for every job
//! it accepted (finished, or run again to completion), serves the proofs it
//! had finished, keeps the proved partitions of jobs it had not finished,
//! keeps idempotency keys, and never reuses an id.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use provd_e2e::{partition_proof, request, Server};
use serde_json::Value;

const CONFIG: &str = r#"
[server]
max_queued_partitions = 256
[[circuits]]
kind = "bench"
name = "bench-12"
[pipeline]
partition_permits = 1
"#;

fn state(server: &Server, id: &str) -> (u16, Value) {
    server.call("GET", &format!("/v1/jobs/{id}"), None)
}

/// How the first process ends.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Kill9,
    /// SIGTERM: the worker drains (every accepted job ends) and exits 0.
    Term,
}

#[test]
fn kill_9_mid_run_then_restart_accounts_for_every_accepted_job() {
    restart_accounts_for_every_accepted_job(Stop::Kill9);
}

#[test]
fn a_clean_stop_then_restart_runs_nothing_again() {
    restart_accounts_for_every_accepted_job(Stop::Term);
}

/// 24 jobs accepted, the process stopped while they run, started again on
/// the same data directory: every accepted job ends succeeded with valid
/// proofs (lost: 0); a job that had ended keeps the very proofs it was
/// served (a proof is randomised, so one proved again would differ:
/// proved twice: 0); retries get their jobs and new jobs new ids.
fn restart_accounts_for_every_accepted_job(stop: Stop) {
    let server = Server::start(CONFIG, &[]);
    let verifier = server.verifier("bench-12");
    let mut accepted = BTreeSet::new();
    let mut keyed = BTreeMap::new();
    for i in 0..24 {
        let body = format!(
            r#"{{"circuit": "bench-12", "partitions": [{{"seed": {}}}, {{"seed": {}}}]}}"#,
            2 * i,
            2 * i + 1
        );
        let key = format!("client-{i}");
        let (status, reply) =
            server.call_with("POST", "/v1/prove", Some(&body), &[("Idempotency-Key", &key)]);
        assert_eq!(status, 202, "{reply}");
        let id = reply["job_id"].as_str().unwrap().to_string();
        keyed.insert(key, (body, id.clone()));
        accepted.insert(id);
    }
    // Some jobs finish, most do not: then the process stops.
    let deadline = Instant::now() + Duration::from_secs(120);
    while accepted.iter().filter(|id| state(&server, id).1["state"] == "succeeded").count() < 3 {
        assert!(Instant::now() < deadline, "no job finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Each succeeded job's proofs, as served.
    let proofs = |server: &Server| -> BTreeMap<String, Vec<String>> {
        accepted
            .iter()
            .filter_map(|id| {
                let job = state(server, id).1;
                let proofs = job["partitions"].as_array()?.iter().map(|p| p["proof"].to_string()).collect();
                (job["state"] == "succeeded").then(|| (id.clone(), proofs))
            })
            .collect()
    };
    let served_before = proofs(&server);
    let data_dir = match stop {
        Stop::Kill9 => server.kill_9(),
        Stop::Term => server.terminate(provd_e2e::JOBS_DEADLINE),
    };
    let server =
        Server::try_start_in(CONFIG, &[], "cpu", data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let ended = server.wait_all(&accepted, provd_e2e::JOBS_DEADLINE);
    for (id, job) in &ended {
        assert_eq!(job["state"], "succeeded", "job {id}: {job}");
        for p in job["partitions"].as_array().unwrap() {
            let (proof, inputs) = partition_proof(p);
            verifier.verify(&proof, &inputs).unwrap_or_else(|e| panic!("job {id}: {e}"));
        }
    }
    let served_after = proofs(&server);
    let proved_twice = served_before.iter().filter(|(id, p)| served_after.get(*id) != Some(p)).count();
    let lost = accepted.len() - ended.len();
    // Partitions the second process proved (ends restored from the journal are not counted).
    let (_, _, metrics) = provd_e2e::raw_request(server.addr, "GET", "/metrics", None, &[]);
    let proved_after_restart: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("provd_partitions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    eprintln!(
        "{stop:?}: accepted {}, lost {lost}, succeeded before the stop {}, of them proved again {proved_twice}; \
         partitions proved after the restart {proved_after_restart}",
        accepted.len(),
        served_before.len()
    );
    assert_eq!((lost, proved_twice), (0, 0));
    if let Stop::Term = stop {
        // The drain ended every job before the exit: nothing is left to run.
        assert_eq!(proved_after_restart, 0.0, "a clean restart ran partitions again");
    }
    // A client retrying after the restart gets its job, not a second one.
    for (key, (body, id)) in keyed.iter().take(5) {
        let r = request(server.addr, "POST", "/v1/prove", Some(body), &[("Idempotency-Key", key)]);
        let reply: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!((r.status, reply["job_id"].as_str()), (202, Some(id.as_str())), "{reply}");
        assert!(r.head.contains("idempotent-replayed: true"), "{}", r.head);
    }
    // New jobs get new ids.
    let (status, reply) =
        server.call("POST", "/v1/prove", Some(r#"{"circuit": "bench-12", "partitions": [{"seed": 99}]}"#));
    assert_eq!(status, 202);
    assert!(!accepted.contains(reply["job_id"].as_str().unwrap()));
}

/// A job killed half-way keeps the partitions it had proved: after the
/// restart they carry the very proofs served before the kill (a proof is
/// randomised, so a partition proved again would carry another), and only
/// the rest run again.
#[test]
fn a_restart_keeps_the_proved_partitions_of_an_unfinished_job() {
    let server = Server::start(CONFIG, &[]);
    let verifier = server.verifier("bench-12");
    let partitions: Vec<String> = (0..24).map(|i| format!(r#"{{"seed": {}}}"#, 1000 + i)).collect();
    let body = format!(r#"{{"circuit": "bench-12", "partitions": [{}]}}"#, partitions.join(", "));
    let (status, reply) = server.call("POST", "/v1/prove", Some(&body));
    assert_eq!(status, 202, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let proved = |job: &Value| -> BTreeMap<usize, String> {
        job["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, p)| p["stage"] == "done")
            .map(|(i, p)| (i, p["proof"].as_str().unwrap().to_string()))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let before = loop {
        let (_, job) = state(&server, &id);
        let done = proved(&job);
        if done.len() >= 3 {
            assert_eq!(job["state"], "running", "the job ended before the kill: nothing was tested");
            break done;
        }
        assert!(Instant::now() < deadline, "no partition was proved: {job}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let data_dir = server.kill_9();

    let server =
        Server::try_start_in(CONFIG, &[], "cpu", data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let ended = server.wait_all(&BTreeSet::from([id.clone()]), provd_e2e::JOBS_DEADLINE);
    let job = &ended[&id];
    assert_eq!(job["state"], "succeeded", "{job}");
    let after = proved(job);
    assert_eq!(after.len(), 24, "{job}");
    for (i, proof) in &before {
        assert_eq!(&after[i], proof, "partition {i} was proved again after the restart");
    }
    for p in job["partitions"].as_array().unwrap() {
        let (proof, inputs) = partition_proof(p);
        verifier.verify(&proof, &inputs).unwrap();
    }
}

#[test]
fn with_on_restart_fail_unfinished_jobs_end_failed_with_the_reason() {
    let config = format!("{CONFIG}[jobs]\non_restart = \"fail\"\n");
    let server = Server::start(&config, &[]);
    let ids: BTreeSet<String> = (0..12)
        .map(|i| {
            let body = format!(r#"{{"circuit": "bench-12", "partitions": [{{"seed": {i}}}]}}"#);
            server.call("POST", "/v1/prove", Some(&body)).1["job_id"].as_str().unwrap().to_string()
        })
        .collect();
    let data_dir = server.kill_9();
    let server =
        Server::try_start_in(&config, &[], "cpu", data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let ended = server.wait_all(&ids, provd_e2e::JOBS_DEADLINE);
    let failed = ended.values().filter(|j| j["state"] == "failed").count();
    assert!(failed > 0, "the kill came after every job: nothing was tested");
    for job in ended.values().filter(|j| j["state"] == "failed") {
        assert!(job["error"].as_str().unwrap().contains("jobs.on_restart"), "{job}");
    }
}

#[test]
fn the_memory_store_is_a_choice_and_loses_jobs_on_restart() {
    let config = format!("{CONFIG}[jobs]\nstore = \"memory\"\n");
    let server = Server::start(&config, &[]);
    let (_, reply) = server.call(
        "POST",
        "/v1/prove?wait=true",
        Some(r#"{"circuit": "bench-12", "partitions": [{"seed": 1}]}"#),
    );
    let id = reply["id"].as_str().unwrap().to_string();
    let data_dir = server.kill_9();
    assert!(!data_dir.path().join("jobs.sqlite3").exists());
    let server = Server::try_start_in(&config, &[], "cpu", data_dir).unwrap();
    assert_eq!(state(&server, &id).0, 404);
}

#[test]
fn a_cancel_answered_survives_a_kill_9_right_after_it() {
    let server = Server::start(CONFIG, &[]);
    let partitions: Vec<String> = (0..24).map(|i| format!(r#"{{"seed": {i}}}"#)).collect();
    let body = format!(r#"{{"circuit": "bench-12", "partitions": [{}]}}"#, partitions.join(","));
    let (status, reply) = server.call("POST", "/v1/prove", Some(&body));
    assert_eq!(status, 202, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let (status, cancelled) = server.call("DELETE", &format!("/v1/jobs/{id}"), None);
    assert_eq!(status, 200, "{cancelled}");
    let data_dir = server.kill_9();

    let server =
        Server::try_start_in(CONFIG, &[], "cpu", data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let (status, job) = state(&server, &id);
    assert_eq!((status, job["state"].as_str()), (200, Some("cancelled")), "{job}");
    let proved = job["partitions"].as_array().unwrap().iter().filter(|p| p["stage"] == "done").count();
    assert!(proved < 24, "every partition was proved: the cancel came too late to test anything");
    // Nothing of it runs after the restart.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(server.metric("provd_partitions_total{outcome=\"succeeded\"}"), 0.0);
}

#[test]
fn a_second_worker_on_the_same_data_directory_is_refused_naming_the_first() {
    let server = Server::start(CONFIG, &[]);
    let config = server.data_dir.path().join("provd.toml");
    let mut second = std::process::Command::new(provd_e2e::provd_bin())
        .args(["serve", "--config", &config.to_string_lossy(), "--listen", "127.0.0.1:0", "--backend", "cpu"])
        .env("PROVD_DATA_DIR", server.data_dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It must exit by itself; a second worker still running after this long
    // took the directory.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            second.kill().unwrap();
            panic!("a second provd serve ran on the same data directory");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("another provd (pid"), "{stderr}");
    assert!(stderr.contains(&server.data_dir.path().display().to_string()), "{stderr}");
    // The first goes on serving.
    assert_eq!(server.call("GET", "/healthz", None).0, 200);
}
