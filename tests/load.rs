//! Many concurrent clients, bounded in count and time: submitting (some with
//! idempotency keys, some retrying them), polling, waiting and cancelling.
//! Afterwards every accepted job is in a final state, none is missing or
//! duplicated, every gauge is back to zero and peak RSS stayed within the
//! memory budget. Prints jobs/s and the submit latency's p50/p99.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use provd_e2e::{raw_request, Server};
use rand::Rng;
use serde_json::Value;

const CONFIG: &str = r#"
[server]
max_queued_partitions = 512
[[circuits]]
kind = "bench"
name = "bench-8"
[pipeline]
memory_budget = "2GiB"
"#;

const CLIENTS: usize = 32;
const OPERATIONS_PER_CLIENT: usize = 40;

#[derive(Default)]
struct Seen {
    /// Every job id a 202/200 handed out, with the idempotency key it was submitted under.
    accepted: BTreeMap<String, Option<String>>,
    /// Idempotency key → the job ids its answers named (one, but for jobs
    /// that were cancelled: a retry after a cancel runs again).
    by_key: BTreeMap<String, BTreeSet<String>>,
    submit_ms: Vec<f64>,
    rejected: usize,
}

#[test]
fn concurrent_clients_lose_nothing_and_leave_nothing_behind() {
    let server = Server::start(CONFIG, &[]);
    let addr = server.addr;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let rss_peak = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (rss_peak, stop) = (rss_peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (_, _, s) = raw_request(addr, "GET", "/v1/status", None, &[]);
                if let Ok(v) = serde_json::from_str::<Value>(&s) {
                    let rss = v["snapshot"]["rss_bytes"].as_u64().unwrap_or(0);
                    let mut p = rss_peak.lock().unwrap();
                    *p = (*p).max(rss);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut rng = rand::thread_rng();
                let mut mine: Vec<String> = Vec::new();
                let mut keys: Vec<(String, String)> = Vec::new();
                for op in 0..OPERATIONS_PER_CLIENT {
                    let roll = rng.gen_range(0..100);
                    if roll < 55 || mine.is_empty() {
                        // Submit: a third with a fresh key, a sixth retrying an old key.
                        let retry = roll % 6 == 0 && !keys.is_empty();
                        let (key, body) = if retry {
                            keys[rng.gen_range(0..keys.len())].clone()
                        } else {
                            let parts = rng.gen_range(1..=3);
                            let ps: Vec<String> = (0..parts)
                                .map(|p| format!(r#"{{"seed": {}}}"#, c * 1000 + op * 10 + p))
                                .collect();
                            let body =
                                format!(r#"{{"circuit": "bench-8", "partitions": [{}]}}"#, ps.join(","));
                            (format!("c{c}-op{op}"), body)
                        };
                        let keyed = retry || roll % 3 == 0;
                        let headers: Vec<(&str, &str)> =
                            if keyed { vec![("Idempotency-Key", key.as_str())] } else { vec![] };
                        let wait = roll % 10 == 1;
                        let path = if wait { "/v1/prove?wait=true" } else { "/v1/prove" };
                        let t = Instant::now();
                        let (status, _, reply) = raw_request(addr, "POST", path, Some(&body), &headers);
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        let mut s = seen.lock().unwrap();
                        match status {
                            200 | 202 => {
                                let v: Value = serde_json::from_str(&reply).unwrap();
                                let id = v["job_id"].as_str().or(v["id"].as_str()).unwrap().to_string();
                                if !wait {
                                    s.submit_ms.push(ms);
                                }
                                s.accepted.insert(id.clone(), keyed.then(|| key.clone()));
                                if keyed {
                                    s.by_key.entry(key.clone()).or_default().insert(id.clone());
                                    if !retry {
                                        keys.push((key, body));
                                    }
                                }
                                mine.push(id);
                            }
                            429 => s.rejected += 1,
                            other => panic!("POST answered {other}: {reply}"),
                        }
                    } else if roll < 90 {
                        let id = &mine[rng.gen_range(0..mine.len())];
                        let (status, _, reply) =
                            raw_request(addr, "GET", &format!("/v1/jobs/{id}"), None, &[]);
                        assert_eq!(status, 200, "{reply}");
                    } else {
                        let id = &mine[rng.gen_range(0..mine.len())];
                        let (status, _, reply) =
                            raw_request(addr, "DELETE", &format!("/v1/jobs/{id}"), None, &[]);
                        assert_eq!(status, 200, "{reply}");
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let s = seen.lock().unwrap();
    // Every accepted job ends, in a final state.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ended: BTreeMap<&String, &str> = BTreeMap::new();
    for id in s.accepted.keys() {
        let state = loop {
            let (status, _, reply) = raw_request(addr, "GET", &format!("/v1/jobs/{id}"), None, &[]);
            assert_eq!(status, 200, "accepted job {id} is missing: {reply}");
            let v: Value = serde_json::from_str(&reply).unwrap();
            match v["state"].as_str().unwrap() {
                "queued" | "running" => {
                    assert!(Instant::now() < deadline, "job {id} did not end: {v}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                "succeeded" => break "succeeded",
                "cancelled" => break "cancelled",
                other => panic!("job {id} ended {other}: {v}"),
            }
        };
        *states.entry(state).or_default() += 1;
        ended.insert(id, state);
    }
    let elapsed = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    // No duplicates: one job per idempotency key but for jobs that were
    // cancelled (a retry after a cancel runs again, under the same key), and
    // the worker counted exactly the jobs the clients were handed.
    for (key, ids) in &s.by_key {
        let kept = ids.iter().filter(|id| ended[id] != "cancelled").count();
        assert!(
            kept <= 1,
            "key {key} named {ids:?}, ended {:?}",
            ids.iter().map(|i| ended[i]).collect::<Vec<_>>()
        );
    }
    let (_, _, status) = raw_request(addr, "GET", "/v1/status", None, &[]);
    let v: Value = serde_json::from_str(&status).unwrap();
    let snap = &v["snapshot"];
    let counted: u64 =
        ["jobs_succeeded", "jobs_failed", "jobs_cancelled"].iter().map(|k| snap[k].as_u64().unwrap()).sum();
    assert_eq!(counted as usize, s.accepted.len(), "{snap}");
    // Every gauge back to zero, nothing reserved but the keys.
    for class in ["synth", "abc", "aux", "density", "pending"] {
        assert_eq!(snap["buffers"][class], 0, "{class}: {snap}");
        assert_eq!(snap["buffer_bytes"][class], 0, "{class}: {snap}");
    }
    assert_eq!(snap["reserved_bytes"], snap["key_bytes"], "{snap}");
    assert_eq!(snap["partitions_waiting"], 0, "{snap}");
    let peak = *rss_peak.lock().unwrap();
    assert!(peak > 0 && peak <= snap["budget_bytes"].as_u64().unwrap(), "peak RSS {peak} over the budget");

    let mut lat = s.submit_ms.clone();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f).round() as usize];
    println!(
        "{} clients, {} jobs accepted ({:?}), {} refused with 429, in {:.1} s: {:.1} jobs/s; submit latency p50 {:.1} ms, p99 {:.1} ms; peak RSS {} MiB",
        CLIENTS,
        s.accepted.len(),
        states,
        s.rejected,
        elapsed.as_secs_f64(),
        s.accepted.len() as f64 / elapsed.as_secs_f64(),
        q(0.5),
        q(0.99),
        peak >> 20
    );
}
