//! Fleet mode against a real PostgreSQL: several provd processes on loopback
//! sharing one job queue. A worker killed with SIGKILL mid-partition loses
//! nothing (its partitions are proved again by the others once its leases
//! run out, and every proof is written exactly once); a worker cut off from
//! the database reports itself unready and resumes without losing or
//! duplicating work; throughput with one, two and three workers.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use provd::fleet::{Claim, PartitionResult, Queue, QueueError, Written};
use provd::groth16::Verifier;
use provd::jobs::journal::{AcceptedJob, StoredWitness};
use provd::pipeline::{JobId, Priority};
use provd::telemetry::labels::{Outcome, Stage};
use provd_e2e::{partition_proof, provd, raw_request, Postgres, Server};
use serde_json::Value;

const CIRCUIT: &str = "bench-12";

/// A TEST-ONLY key every worker loads (workers of one fleet must share keys).
fn shared_key() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = provd(dir.path(), &["params", "gen", "--circuit", CIRCUIT]);
    assert!(out.status.success(), "params gen: {}", String::from_utf8_lossy(&out.stderr));
    let path = dir.path().join("params").join(format!("{CIRCUIT}.v1.test-only.params"));
    assert!(path.exists());
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

fn config(url: &str, key: &str, worker: &str) -> String {
    format!(
        r#"
[server]
max_queued_partitions = 256
[[circuits]]
kind = "bench"
name = "{CIRCUIT}"
params = "{key}"
[pipeline]
partition_permits = 1
[jobs]
store = "{url}"
[fleet]
worker_id = "{worker}"
lease_seconds = 3
heartbeat_seconds = 1
poll_ms = 20
"#
    )
}

fn worker(pg: &Postgres, key: &str, name: &str) -> Server {
    Server::try_start(&config(&pg.url(), key, name), &[], "cpu")
        .unwrap_or_else(|stderr| panic!("worker {name} did not start: {stderr}"))
}

fn submit(server: &Server, seeds: &[u64], key: &str) -> String {
    let partitions: Vec<String> = seeds.iter().map(|s| format!(r#"{{"seed": {s}}}"#)).collect();
    let body = format!(r#"{{"circuit": "{CIRCUIT}", "partitions": [{}]}}"#, partitions.join(","));
    let (status, reply) = server.call_with("POST", "/v1/prove", Some(&body), &[("Idempotency-Key", key)]);
    assert_eq!(status, 202, "{reply}");
    reply["job_id"].as_str().unwrap().to_string()
}

/// Every proof verifies; the number of partitions checked.
fn check_proofs(jobs: &BTreeMap<String, Value>, verifier: &Verifier) -> usize {
    let mut n = 0;
    for (id, job) in jobs {
        assert_eq!(job["state"], "succeeded", "job {id}: {job}");
        for p in job["partitions"].as_array().unwrap() {
            let (proof, inputs) = partition_proof(p);
            verifier.verify(&proof, &inputs).unwrap_or_else(|e| panic!("job {id}: {e}"));
            n += 1;
        }
    }
    n
}

/// The engine's gauges are back to zero: only the key is reserved, no
/// buffer is held, nothing is claimed.
fn assert_idle(server: &Server, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = server.call("GET", "/v1/status", None);
        let s = &status["snapshot"];
        let buffers_zero = s["buffers"].as_object().unwrap().values().all(|v| v == 0);
        if s["reserved_bytes"] == s["key_bytes"] && buffers_zero && s["fleet"]["claimed_here"] == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "worker {name} did not return to idle: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_worker_killed_mid_partition_loses_nothing_and_nothing_is_proved_twice() {
    let Some(pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    let w0 = worker(&pg, &key, "w0");
    let w1 = worker(&pg, &key, "w1");
    let w2 = worker(&pg, &key, "w2");
    let workers = [&w0, &w1, &w2];
    let mut ids = Vec::new();
    for j in 0..12u64 {
        // Submitted through each worker in turn.
        ids.push(submit(workers[j as usize % 3], &[3 * j, 3 * j + 1, 3 * j + 2], &format!("job-{j}")));
    }
    // A retry through another worker returns the same job.
    assert_eq!(submit(&w1, &[0, 1, 2], "job-0"), ids[0]);
    // Kill w2 while it holds a partition.
    let deadline = Instant::now() + Duration::from_secs(60);
    while w2.metric("provd_fleet_claimed_partitions") < 1.0 {
        assert!(Instant::now() < deadline, "w2 never claimed a partition");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = Instant::now();
    drop(w2.kill_9());
    let jobs = w0.wait_all(&ids, provd_e2e::JOBS_DEADLINE);
    eprintln!("all 12 jobs ended {:.1} s after the kill", killed_at.elapsed().as_secs_f64());
    let verifier = w0.verifier(CIRCUIT);
    assert_eq!(check_proofs(&jobs, &verifier), 36);
    // Any worker answers for any job.
    for id in &ids {
        let (status, doc) = w1.call("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!((status, &doc["state"]), (200, &Value::from("succeeded")), "{doc}");
    }
    // Exactly once: one proof row per partition, and w2's unfinished claims
    // (their leases ran out) proved by the others.
    let mut db = pg.client();
    let proofs: i64 = db.query_one("SELECT count(*) FROM proofs", &[]).unwrap().get(0);
    assert_eq!(proofs, 36);
    let taken_back = db
        .query(
            "SELECT p.job_id, p.idx, f.worker, p.attempt FROM partitions p JOIN proofs f USING (job_id, idx)
             WHERE p.error LIKE 'the lease of worker w2 ran out%'",
            &[],
        )
        .unwrap();
    assert!(!taken_back.is_empty(), "no partition of w2's went back to the queue");
    for row in &taken_back {
        let (by, attempt): (String, i32) = (row.get(2), row.get(3));
        assert_ne!(by, "w2", "a partition whose lease ran out was proved by the dead worker");
        assert!(attempt >= 2, "re-proved at attempt {attempt}");
    }
    let expiries =
        w0.metric("provd_fleet_lease_expiries_total") + w1.metric("provd_fleet_lease_expiries_total");
    assert!(
        expiries >= taken_back.len() as f64,
        "{expiries} expiries counted for {} partitions",
        taken_back.len()
    );
    for (w, name) in [(&w0, "w0"), (&w1, "w1")] {
        assert!(w.metric("provd_fleet_claims_total") > 0.0, "{name} claimed nothing");
        assert_idle(w, name);
    }
    check_fleet_scrape(&w0);
}

/// Every fleet metric the dashboard and alerts may use is exported, and the
/// scrape passes `promtool check metrics` (when promtool is installed).
fn check_fleet_scrape(w: &Server) {
    let (_, _, scrape) = raw_request(w.addr, "GET", "/metrics", None, &[]);
    for name in provd_e2e::FLEET_ONLY_METRICS {
        assert!(scrape.contains(&format!("# TYPE {name} ")), "{name} is not exported by a fleet worker");
    }
    provd::telemetry::metrics::assert_promtool_accepts(&scrape);
}

/// A job of the shared circuit, written to the queue as a client's would be.
fn accepted(priority: Priority, witnesses: Vec<StoredWitness>) -> AcceptedJob {
    AcceptedJob {
        id: JobId::new(),
        circuit: CIRCUIT.into(),
        priority,
        door: provd::pipeline::Door::Http,
        witnesses,
        idempotency: None,
    }
}

/// Claims age queued partitions as the engine does: a class a minute here.
const AGING_MS: i64 = 60_000;

/// Workers claim the most urgent partition first, whichever was queued first,
/// and a partition that has waited long enough competes a class higher.
#[test]
fn claims_take_the_most_urgent_partition_first() {
    let Some(pg) = Postgres::start() else { return };
    let mut queue = Queue::connect_and_migrate(&pg.url()).unwrap();
    let circuits = [CIRCUIT.to_string()];
    let job = |priority, seed: u64| {
        accepted(priority, vec![StoredWitness::Json(serde_json::json!({ "seed": seed }))])
    };
    let mut ids = BTreeMap::new();
    for (priority, seed) in
        [(Priority::Low, 1), (Priority::Normal, 2), (Priority::Critical, 3), (Priority::High, 4)]
    {
        ids.insert(queue.submit(&job(priority, seed), "client", 256).unwrap().0, priority);
    }
    let order: Vec<Priority> = std::iter::from_fn(|| queue.claim("w", &circuits, 60_000, AGING_MS).unwrap())
        .map(|c| {
            assert_eq!(c.priority, ids[&c.job], "a claim carries its job's priority");
            c.priority
        })
        .collect();
    assert_eq!(order, [Priority::Critical, Priority::High, Priority::Normal, Priority::Low]);
    let status = queue.status(*ids.keys().next().unwrap()).unwrap().unwrap();
    assert_eq!(status.priority, ids[&status.id]);
    // Aged: with a class raised per millisecond waited, the low job queued
    // first competes as high, ahead of a high one queued after it; critical
    // work still goes first.
    let old_low = queue.submit(&job(Priority::Low, 5), "client", 256).unwrap().0;
    std::thread::sleep(Duration::from_millis(20));
    queue.submit(&job(Priority::High, 6), "client", 256).unwrap();
    let critical = queue.submit(&job(Priority::Critical, 7), "client", 256).unwrap().0;
    let first = queue.claim("w", &circuits, 60_000, 1).unwrap().unwrap();
    let second = queue.claim("w", &circuits, 60_000, 1).unwrap().unwrap();
    assert_eq!((first.job, second.job), (critical, old_low));
}

/// Submissions through several connections at once never pass the fleet's
/// queue bound together: of six jobs of 200 partitions against a bound of
/// 256, with no worker claiming, exactly one is accepted. The bound is per
/// class: with the normal queue full, a critical job still goes in.
#[test]
fn the_fleets_queue_bound_holds_under_concurrent_submissions() {
    let Some(pg) = Postgres::start() else { return };
    drop(Queue::connect_and_migrate(&pg.url()).unwrap());
    let url = pg.url();
    let answers: Vec<Result<(JobId, bool), QueueError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let url = url.clone();
                scope.spawn(move || {
                    let mut queue = Queue::connect(&url).unwrap();
                    let witnesses = (0..200)
                        .map(|p| StoredWitness::Json(serde_json::json!({"seed": 1000 * t + p})))
                        .collect();
                    let job = accepted(Priority::Normal, witnesses);
                    queue.submit(&job, "client", 256)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 1, "{answers:?}");
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(
            matches!(refused, QueueError::Full { priority: Priority::Normal, queued: 200, limit: 256 }),
            "{refused}"
        );
    }
    let mut queue = Queue::connect(&url).unwrap();
    let witnesses = |n: u64| (0..n).map(|p| StoredWitness::Json(serde_json::json!({"seed": p}))).collect();
    let (_, new) = queue.submit(&accepted(Priority::Critical, witnesses(200)), "client", 256).unwrap();
    assert!(new, "a critical job beside a full normal queue");
    let normal = queue.submit(&accepted(Priority::Normal, witnesses(57)), "client", 256).unwrap_err();
    assert!(matches!(normal, QueueError::Full { priority: Priority::Normal, .. }), "{normal}");
    assert_eq!(queue.stats().unwrap().queued_by_priority, [0, 200, 0, 200]);
}

/// Clients waiting on a job (`?wait=true`) cost the database one query a
/// poll between them, not one each: with 300 waiters, the database's
/// transaction rate rises by little (every waiter polling through the API's
/// one connection added 5,186 a second against 25 without them, and a
/// submission queued behind them for up to 18 s in the reliability report).
#[test]
fn waiting_clients_cost_the_database_one_query_a_poll() {
    let Some(pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    let w = worker(&pg, &key, "w");
    let seeds: Vec<u64> = (0..250).collect();
    let partitions: Vec<String> = seeds.iter().map(|s| format!(r#"{{"seed": {s}}}"#)).collect();
    let body = format!(r#"{{"circuit": "{CIRCUIT}", "partitions": [{}]}}"#, partitions.join(","));
    let (status, reply) = w.call_with("POST", "/v1/prove", Some(&body), &[("Idempotency-Key", "long")]);
    assert_eq!(status, 202, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let mut db = pg.client();
    let commits = |db: &mut postgres::Client| -> i64 {
        db.query_one("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()", &[])
            .unwrap()
            .get(0)
    };
    let window = Duration::from_secs(3);
    let rate = |db: &mut postgres::Client| {
        let before = commits(db);
        std::thread::sleep(window);
        (commits(db) - before) as f64 / window.as_secs_f64()
    };
    let idle_rate = rate(&mut db);
    // 300 clients resubmit the same job with ?wait=true: each waits on it.
    let waiters: Vec<_> = (0..300)
        .map(|_| {
            let (addr, body) = (w.addr, body.clone());
            std::thread::spawn(move || {
                raw_request(addr, "POST", "/v1/prove?wait=true", Some(&body), &[("Idempotency-Key", "long")])
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3)); // every waiter is in, its backoff at its longest
    let waiting_rate = rate(&mut db);
    eprintln!("database transactions a second: {idle_rate:.0} without waiters, {waiting_rate:.0} with 300");

    let ended: bool =
        db.query_one("SELECT ended_ms IS NOT NULL FROM jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert!(!ended, "the job ended before the waiting window closed: give it more partitions");
    assert!(
        waiting_rate - idle_rate < 300.0,
        "300 waiters added {:.0} transactions a second ({idle_rate:.0} without them)",
        waiting_rate - idle_rate
    );
    for waiter in waiters {
        let (status, _, reply) = waiter.join().unwrap();
        assert_eq!(status, 200, "every waiter gets the ended job: {reply}");
    }
}

/// SIGTERM drains a fleet worker and it exits 0, every time: its database
/// connections are closed outside the HTTP runtime (closing one inside it
/// panicked in 6 of 10 stops).
#[test]
fn a_fleet_worker_stops_cleanly_on_sigterm() {
    let Some(pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    for round in 0..4 {
        let mut w = worker(&pg, &key, &format!("w{round}"));
        let id = submit(&w, &[round], &format!("stop-{round}"));
        w.wait_all([&id], provd_e2e::JOBS_DEADLINE);
        let term =
            std::process::Command::new("kill").args(["-TERM", &w.child.id().to_string()]).status().unwrap();
        assert!(term.success());
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = w.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "worker {round} still running 120 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0), "stop {round}: {}", w.stderr());
    }
}

#[test]
fn a_worker_cut_off_from_its_database_is_unready_then_resumes_without_loss() {
    let Some(mut pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    let w0 = worker(&pg, &key, "w0");
    let first = submit(&w0, &[1, 2], "first");
    w0.wait_all(std::slice::from_ref(&first), provd_e2e::JOBS_DEADLINE);
    assert_eq!(w0.metric("provd_fleet_database_up"), 1.0, "exported, and up");
    // ?wait=true answers with the ended job, read from the queue.
    let body = format!(r#"{{"circuit": "{CIRCUIT}", "partitions": [{{"seed": 3}}]}}"#);
    let (status, waited) = w0.call("POST", "/v1/prove?wait=true", Some(&body));
    assert_eq!((status, &waited["state"]), (200, &Value::from("succeeded")), "{waited}");
    // A job in flight when the database goes away.
    let second = submit(&w0, &[10, 11, 12, 13, 14, 15], "second");
    std::thread::sleep(Duration::from_millis(150));
    pg.stop();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = w0.call("GET", "/readyz", None);
        if status == 503 {
            assert!(body["error"].as_str().unwrap().contains("database"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "w0 still ready with its database stopped: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, body) = w0.call(
        "POST",
        "/v1/prove",
        Some(&format!(r#"{{"circuit": "{CIRCUIT}", "partitions": [{{"seed": 99}}]}}"#)),
    );
    assert_eq!(status, 503, "a submission while the queue is away: {body}");
    let (status, _) = w0.call("GET", &format!("/v1/jobs/{second}"), None);
    assert_eq!(status, 503, "a job document while the queue is away");
    assert_eq!(w0.metric("provd_fleet_database_up"), 0.0);
    std::thread::sleep(Duration::from_secs(2));
    pg.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    while w0.call("GET", "/readyz", None).0 != 200 {
        assert!(Instant::now() < deadline, "w0 did not become ready again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let jobs = w0.wait_all(&[first.clone(), second.clone()], provd_e2e::JOBS_DEADLINE);
    assert_eq!(check_proofs(&jobs, &w0.verifier(CIRCUIT)), 8);
    let proofs: i64 = pg.client().query_one("SELECT count(*) FROM proofs", &[]).unwrap().get(0);
    assert_eq!(proofs, 9, "every partition proved once");
    assert_eq!(w0.metric("provd_fleet_database_up"), 1.0);
    assert_idle(&w0, "w0");
}

/// Throughput with one, two and three CPU workers in one run, beside one
/// worker of the SQLite journal's (no queue) on the same jobs: the claim's
/// cost per partition is the difference. The dev machine has 2 cores, so
/// three workers share two: this shows the queue adds no serial bottleneck,
/// not how a fleet of real machines scales.
#[test]
fn throughput_with_one_two_and_three_workers() {
    let Some(pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    const JOBS: u64 = 24;
    let run = |servers: &[&Server], tag: u64| -> f64 {
        let start = Instant::now();
        let ids: Vec<String> = (0..JOBS)
            .map(|j| submit(servers[j as usize % servers.len()], &[tag * 1000 + j], &format!("t{tag}-{j}")))
            .collect();
        let jobs = servers[0].wait_all(&ids, provd_e2e::JOBS_DEADLINE);
        let secs = start.elapsed().as_secs_f64();
        assert!(jobs.values().all(|j| j["state"] == "succeeded"));
        JOBS as f64 / secs
    };
    let local_cfg = format!(
        "[[circuits]]\nkind = \"bench\"\nname = \"{CIRCUIT}\"\nparams = \"{key}\"\n[pipeline]\npartition_permits = 1\n"
    );
    let local = Server::start(&local_cfg, &[]);
    run(&[&local], 0); // warm-up
    let alone = run(&[&local], 1);
    drop(local);
    // One more worker joins for each run.
    let mut workers: Vec<Server> = Vec::new();
    let mut rows = Vec::new();
    for n in 1..=3 {
        workers.push(worker(&pg, &key, &format!("t{n}")));
        let servers: Vec<&Server> = workers.iter().collect();
        if n == 1 {
            run(&servers, 10); // warm-up
        }
        rows.push((n, run(&servers, 10 + n as u64)));
    }
    let one = rows[0].1;
    eprintln!("| workers | jobs/s (1 partition each, {CIRCUIT}) | vs one |");
    eprintln!("|---|---|---|");
    eprintln!("| 1, SQLite journal, no queue | {alone:.2} | |");
    for (n, rate) in &rows {
        eprintln!("| {n} | {rate:.2} | {:.2}× |", rate / one);
    }
    eprintln!(
        "claim overhead per partition (1 fleet worker against 1 local): {:.1} ms",
        (1.0 / one - 1.0 / alone) * 1e3
    );
}

/// The tables' contract for other systems (docs/operations.md): a job
/// inserted by SQL is proved, one whose witness is bad fails at once with the
/// reason (no retries), and DELETE cancels a fleet job on any worker.
#[test]
fn jobs_written_into_the_tables_are_proved_and_bad_ones_fail_once() {
    let Some(pg) = Postgres::start() else { return };
    let (_keys, key) = shared_key();
    // Ended jobs are kept for 4 s here (job_retention_seconds), then deleted.
    let config = config(&pg.url(), &key, "w0").replace("[server]\n", "[server]\njob_retention_seconds = 4\n");
    let w0 = Server::try_start(&config, &[], "cpu").unwrap_or_else(|e| panic!("w0: {e}"));
    let mut db = pg.client();
    let insert = |db: &mut postgres::Client, id: &str, witnesses: &[&str]| {
        let mut tx = db.transaction().unwrap();
        tx.execute(
            "INSERT INTO jobs (id, circuit, state, partitions, created_ms, submitted_by)
             VALUES ($1, $2, 'queued', $3, (extract(epoch from now()) * 1000)::bigint, 'sql-test')",
            &[&id, &CIRCUIT, &(witnesses.len() as i32)],
        )
        .unwrap();
        for (i, w) in witnesses.iter().enumerate() {
            tx.execute(
                "INSERT INTO partitions (job_id, idx, circuit, witness_json, state, queued_ms)
                 VALUES ($1, $2, $3, $4, 'queued', (extract(epoch from now()) * 1000)::bigint)",
                &[&id, &(i as i32), &CIRCUIT, w],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    };
    let good = "0190f6a0-0000-7000-8000-000000000001";
    let bad = "0190f6a0-0000-7000-8000-000000000002";
    insert(&mut db, good, &[r#"{"seed": 5}"#, r#"{"seed": 6}"#]);
    insert(&mut db, bad, &[r#"{"seed": 7}"#, r#"{"seed": "seven"}"#]);
    let jobs = w0.wait_all(&[good.to_string(), bad.to_string()], provd_e2e::JOBS_DEADLINE);
    assert_eq!(
        check_proofs(&BTreeMap::from([(good.to_string(), jobs[good].clone())]), &w0.verifier(CIRCUIT)),
        2
    );
    assert_eq!(jobs[bad]["state"], "failed", "{}", jobs[bad]);
    let error = jobs[bad]["error"].as_str().unwrap();
    assert!(error.contains("partition 1") && error.contains("seed"), "{error}");
    let attempts: i32 =
        db.query_one("SELECT attempt FROM partitions WHERE job_id = $1 AND idx = 1", &[&bad]).unwrap().get(0);
    assert_eq!(attempts, 1, "a bad witness is not retried");
    // Cancelling a queued fleet job (no worker serves its circuit yet).
    let other = "0190f6a0-0000-7000-8000-000000000003";
    let mut tx = db.transaction().unwrap();
    tx.execute(
        "INSERT INTO jobs (id, circuit, state, partitions, created_ms, submitted_by)
         VALUES ($1, 'not-served', 'queued', 1, 0, 'sql-test')",
        &[&other],
    )
    .unwrap();
    tx.execute(
        "INSERT INTO partitions (job_id, idx, circuit, witness_json, state, queued_ms)
         VALUES ($1, 0, 'not-served', '{}', 'queued', 0)",
        &[&other],
    )
    .unwrap();
    tx.commit().unwrap();
    let (status, doc) = w0.call("GET", &format!("/v1/jobs/{other}"), None);
    assert_eq!((status, &doc["partitions"][0]["stage"]), (200, &Value::from("queued")), "{doc}");
    let (status, doc) = w0.call("DELETE", &format!("/v1/jobs/{other}"), None);
    assert_eq!((status, &doc["state"]), (200, &Value::from("cancelled")), "{doc}");
    let (status, _) = w0.call("GET", "/v1/jobs/0190f6a0-0000-7000-8000-00000000ffff", None);
    assert_eq!(status, 404);
    assert_idle(&w0, "w0");
    // Past the retention, ended jobs are gone with their partitions and proofs.
    let deadline = Instant::now() + Duration::from_secs(30);
    while w0.call("GET", &format!("/v1/jobs/{good}"), None).0 != 404 {
        assert!(Instant::now() < deadline, "an ended job outlived its retention");
        std::thread::sleep(Duration::from_millis(200));
    }
    let left: i64 = db.query_one("SELECT count(*) FROM proofs", &[]).unwrap().get(0);
    assert_eq!(left, 0, "proofs of deleted jobs");
}

/// Jobs of two partitions each, partition 0 claimed by worker "a" on the
/// first queue connection and partition 1 by worker "b" on the second: for
/// tests that race the writes that end a job.
struct BothClaimed {
    queues: [Queue; 2],
    ids: Vec<JobId>,
    claims: [Vec<Claim>; 2],
}

impl BothClaimed {
    const WORKERS: [&'static str; 2] = ["a", "b"];

    fn new(pg: &Postgres, jobs: usize) -> Self {
        let mut queues = [Queue::connect_and_migrate(&pg.url()).unwrap(), Queue::connect(&pg.url()).unwrap()];
        let circuits = [CIRCUIT.to_string()];
        let (mut ids, mut claims) = (Vec::new(), <[Vec<_>; 2]>::default());
        for j in 0..jobs {
            let witnesses =
                (0..2).map(|p| StoredWitness::Json(serde_json::json!({"seed": 2 * j + p}))).collect();
            let job = accepted(Priority::Normal, witnesses);
            ids.push(queues[0].submit(&job, "a", 256).unwrap().0);
            for (w, name) in Self::WORKERS.into_iter().enumerate() {
                let claim =
                    queues[w].claim(name, &circuits, 60_000, AGING_MS).unwrap().expect("a queued partition");
                assert_eq!((claim.job, claim.index), (ids[j], w));
                claims[w].push(claim);
            }
        }
        Self { queues, ids, claims }
    }

    /// Each worker writes its partition of every job, on a thread of its
    /// own, waiting at `barrier` before each write (so that the writes of a
    /// job start together); the writes' outcomes, by worker and job.
    fn write_all(self, barrier: &Arc<Barrier>) -> (Vec<JobId>, Vec<Vec<Written>>) {
        // Any well-formed proof will do: the points at infinity, compressed.
        let mut bytes = [0u8; provd::groth16::Proof::BYTES];
        for at in [0, 48, 144] {
            bytes[at] = 0xc0;
        }
        let proved = PartitionResult::Proved {
            proof: Box::new(provd::groth16::Proof::from_bytes(&bytes).unwrap()),
            public_inputs: Vec::new(),
        };
        let writers: Vec<_> = self
            .queues
            .into_iter()
            .zip(self.claims)
            .zip(Self::WORKERS)
            .map(|((mut queue, claims), name)| {
                let (barrier, proved) = (barrier.clone(), proved.clone());
                std::thread::spawn(move || {
                    let mut written = Vec::new();
                    for claim in &claims {
                        barrier.wait();
                        let w = queue.finish(name, claim, &proved, 3);
                        written.push(w.unwrap_or_else(|e| panic!("worker {name}, job {}: {e}", claim.job)));
                    }
                    written
                })
            })
            .collect();
        (self.ids, writers.into_iter().map(|w| w.join().unwrap()).collect())
    }
}

/// Two workers writing a job's last two partitions at the same moment: the
/// job must end. Each write checks whether every partition has succeeded;
/// unless the two are serialised, each sees the other's partition still
/// claimed (neither has committed) and the job stays `running` forever.
#[test]
fn a_job_whose_last_partitions_finish_at_once_ends() {
    let Some(pg) = Postgres::start() else { return };
    const JOBS: usize = 40;
    let barrier = Arc::new(Barrier::new(2));
    let (ids, written) = BothClaimed::new(&pg, JOBS).write_all(&barrier);
    assert!(written.iter().flatten().all(|w| *w == Written::Taken), "{written:?}");
    let mut queue = Queue::connect(&pg.url()).unwrap();
    let stuck: Vec<_> = ids.iter().filter(|id| queue.has_ended(**id).unwrap() != Some(true)).collect();
    assert!(stuck.is_empty(), "{} of {JOBS} jobs have every partition proved and did not end", stuck.len());
    for id in &ids {
        assert_eq!(queue.status(*id).unwrap().unwrap().outcome, Some(Outcome::Succeeded), "job {id}");
    }
}

/// A client cancelling a job while both its partitions are written: no
/// transaction deadlocks (each takes a job's partitions before the job
/// itself), and each job ends once, succeeded with both proofs or cancelled.
#[test]
fn a_cancel_racing_the_last_writes_neither_deadlocks_nor_leaves_the_job_open() {
    let Some(pg) = Postgres::start() else { return };
    const JOBS: usize = 40;
    let both = BothClaimed::new(&pg, JOBS);
    let barrier = Arc::new(Barrier::new(3));
    let canceller = {
        let (barrier, ids, url) = (barrier.clone(), both.ids.clone(), pg.url());
        std::thread::spawn(move || {
            let mut queue = Queue::connect(&url).unwrap();
            for id in ids {
                barrier.wait();
                assert!(queue.cancel(id).unwrap_or_else(|e| panic!("cancelling job {id}: {e}")));
            }
        })
    };
    let (ids, written) = both.write_all(&barrier);
    canceller.join().unwrap();
    let mut queue = Queue::connect(&pg.url()).unwrap();
    for (j, id) in ids.iter().enumerate() {
        let status = queue.status(*id).unwrap().unwrap();
        let taken = [written[0][j], written[1][j]].map(|w| w == Written::Taken);
        match status.outcome {
            Some(Outcome::Succeeded) => {
                assert_eq!(taken, [true, true], "job {id}");
                assert!(status.partitions.iter().all(|p| p.stage == Stage::Done), "job {id}: {status:?}");
            }
            Some(Outcome::Cancelled) => {
                assert_ne!(taken, [true, true], "job {id}: both written, yet cancelled")
            }
            other => panic!("job {id} ended {other:?}: {status:?}"),
        }
    }
}
