//! Faults the worker must live through: its log writer gone, signals while
//! jobs run, clients that never finish their request.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use provd_e2e::{provd_bin, raw_request};

const CONFIG: &str = r#"
[server]
shutdown_grace_seconds = 60
max_queued_partitions = 64
[[circuits]]
kind = "bench"
name = "bench-14"
[pipeline]
partition_permits = 1
"#;

/// `provd serve` on a loopback port with stderr piped (and handed back) and
/// stdout read until the listening line.
fn start(dir: &std::path::Path) -> (Child, std::net::SocketAddr, std::process::ChildStderr) {
    start_with(dir, CONFIG)
}

fn start_with(dir: &std::path::Path, text: &str) -> (Child, std::net::SocketAddr, std::process::ChildStderr) {
    let config = dir.join("provd.toml");
    std::fs::write(&config, text).unwrap();
    let mut child = Command::new(provd_bin())
        .args(["serve", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0", "--backend", "cpu"])
        .env("PROVD_DATA_DIR", dir)
        .env("PROVD_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "provd exited before listening");
        if let Some(a) = line.trim().strip_prefix("provd listening on http://") {
            break a.parse().unwrap();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let err = child.stderr.take().unwrap();
    (child, addr, err)
}

/// `provd serve` with `server` lines added to the `[server]` table, its
/// stderr read and dropped.
fn start_serving(dir: &std::path::Path, server: &str) -> (Child, std::net::SocketAddr) {
    let (child, addr, stderr) =
        start_with(dir, &CONFIG.replace("[server]\n", &format!("[server]\n{server}")));
    std::thread::spawn(move || std::io::copy(&mut BufReader::new(stderr), &mut std::io::sink()));
    (child, addr)
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

fn submit(addr: std::net::SocketAddr, seeds: std::ops::Range<u64>) -> String {
    let parts: Vec<String> = seeds.map(|s| format!(r#"{{"seed": {s}}}"#)).collect();
    let body = format!(r#"{{"circuit": "bench-14", "partitions": [{}]}}"#, parts.join(","));
    let (status, _, reply) = raw_request(addr, "POST", "/v1/prove", Some(&body), &[]);
    assert_eq!(status, 202, "{reply}");
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    v["job_id"].as_str().unwrap().to_string()
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_closed_log_pipe_drops_lines_and_the_worker_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, stderr) = start(dir.path());
    drop(stderr); // every log line from now on meets a closed pipe
    for i in 0..4 {
        let id = submit(addr, i * 2..i * 2 + 2);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, _, job) = raw_request(addr, "GET", &format!("/v1/jobs/{id}"), None, &[]);
            assert_eq!(status, 200, "{job}");
            if job.contains("\"succeeded\"") {
                break;
            }
            assert!(Instant::now() < deadline && !job.contains("\"failed\""), "{job}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let (status, _, metrics) = raw_request(addr, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    let dropped: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("provd_log_lines_dropped_total "))
        .expect("the counter is exported")
        .parse()
        .unwrap();
    assert!(dropped > 0.0, "job logs were written somewhere: {dropped}");
    assert!(metrics.contains("provd_panics_total 0"), "no thread panicked");
    assert!(child.try_wait().unwrap().is_none(), "the worker is still running");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, stderr) = start(dir.path());
    std::thread::spawn(move || std::io::copy(&mut BufReader::new(stderr), &mut std::io::sink()));
    submit(addr, 0..40); // tens of seconds of work: the drain would wait for it
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "TERM");
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "the first signal drains, it does not exit");
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(5)).expect("exits soon after a second signal");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn shutdown_ends_within_the_grace_despite_a_half_sent_request() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, stderr) = start(dir.path());
    std::thread::spawn(move || std::io::copy(&mut BufReader::new(stderr), &mut std::io::sink()));
    // A client that sends half a request and then nothing.
    let mut stuck = std::net::TcpStream::connect(addr).unwrap();
    stuck
        .write_all(b"POST /v1/prove HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"circ")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    signal(&child, "TERM");
    // No accepted jobs: the drain ends at once; open connections get 5 s.
    let status = wait_exit(&mut child, Duration::from_secs(15)).expect("exits despite the stuck client");
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    drop(stuck);
}

/// `?wait=true` holds no thread: with more clients waiting than tokio's
/// blocking pool has threads (512), the rest of the API still answers at once.
#[test]
fn many_waiting_clients_hold_no_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, stderr) = start(dir.path());
    std::thread::spawn(move || std::io::copy(&mut BufReader::new(stderr), &mut std::io::sink()));
    let parts: Vec<String> = (0..40).map(|s| format!(r#"{{"seed": {s}}}"#)).collect();
    let body = format!(r#"{{"circuit": "bench-14", "partitions": [{}]}}"#, parts.join(","));
    let key = [("Idempotency-Key", "one-long-job")];
    let (status, _, reply) = raw_request(addr, "POST", "/v1/prove", Some(&body), &key);
    assert_eq!(status, 202, "{reply}");
    let id =
        serde_json::from_str::<serde_json::Value>(&reply).unwrap()["job_id"].as_str().unwrap().to_string();
    // Every waiter retries the same request, so all wait on the one job.
    let waiters: Vec<_> = (0..550)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || raw_request(addr, "POST", "/v1/prove?wait=true", Some(&body), &key))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let (status, _, _) = raw_request(addr, "GET", "/v1/status", None, &[]);
    assert_eq!(status, 200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "/v1/status took {:?} with 550 clients waiting",
        t.elapsed()
    );
    let (status, _, _) = raw_request(addr, "DELETE", &format!("/v1/jobs/{id}"), None, &[]);
    assert_eq!(status, 200);
    for w in waiters {
        let (status, head, reply) = w.join().unwrap();
        assert_eq!(status, 200, "{reply}");
        assert!(reply.contains("\"cancelled\"") && head.contains("idempotent-replayed: true"), "{reply}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads until the peer closes (true) or `within` passes (false).
fn closed_within(stream: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an error response before the close
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true, // reset
        }
    }
}

#[test]
fn slow_and_idle_connections_are_closed_and_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_serving(dir.path(), "header_read_timeout_seconds = 1\n");
    let mut idle: Vec<_> = (0..20).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap(); // and never the end
    let (status, _, _) = raw_request(addr, "GET", "/healthz", None, &[]);
    assert_eq!(status, 200, "others are served meanwhile");
    assert!(closed_within(&mut slow, Duration::from_secs(5)), "a half-sent request is cut off");
    for c in &mut idle {
        assert!(closed_within(c, Duration::from_secs(5)), "an idle connection is closed");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn connections_and_event_streams_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_serving(
        dir.path(),
        "max_connections = 4\nmax_event_streams = 2\nheader_read_timeout_seconds = 2\n",
    );
    // Two event streams take their places; a third is refused with 503.
    let streams: Vec<_> = (0..2)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap()).read_line(&mut line).unwrap();
            assert!(line.starts_with("HTTP/1.1 200"), "{line}");
            s
        })
        .collect();
    let (status, _, body) = raw_request(addr, "GET", "/v1/events", None, &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("max_event_streams"), "{body}");
    // The refused stream's connection must be gone from the server's count
    // before the cap is filled (on a loaded CI machine its close can lag).
    std::thread::sleep(Duration::from_secs(1));
    // With both streams and two uploads under way (every one being served,
    // none waiting on its client), the cap (4) is reached: a fifth
    // connection is closed at once.
    let uploads: Vec<_> = (0..2)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(
                b"POST /v1/prove HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{\"circuit\": ",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = std::net::TcpStream::connect(addr).unwrap();
    let _ = fifth.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert!(closed_within(&mut fifth, Duration::from_secs(1)), "over the cap, a connection is closed");
    drop(uploads);
    drop(streams);
    // Once the uploads and the streams are gone, connections are served
    // again; the refused one was counted.
    std::thread::sleep(Duration::from_secs(1));
    let (status, _, _) = raw_request(addr, "GET", "/healthz", None, &[]);
    assert_eq!(status, 200);
    let (_, _, metrics) = raw_request(addr, "GET", "/metrics", None, &[]);
    let refused = metrics.lines().find_map(|l| l.strip_prefix("provd_connections_refused_total "));
    assert!(refused.and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n >= 1), "refused: {refused:?}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Clients that pipeline requests and never read the answers (the flood of
/// the reliability report): with every connection slot theirs, a new client
/// is still answered (one of them gives way), and each is closed once its
/// writes have made no progress for `server.write_timeout_seconds`.
#[test]
fn clients_that_never_read_give_way_and_are_closed_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_serving(
        dir.path(),
        "max_connections = 8\nwrite_timeout_seconds = 2\nheader_read_timeout_seconds = 60\n",
    );
    // Megabytes of answers per connection: far more than socket buffers hold.
    let flood = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(100_000);
    let stalled: Vec<_> = (0..8)
        .map(|_| {
            let s = std::net::TcpStream::connect(addr).unwrap();
            let mut writer = s.try_clone().unwrap();
            let flood = flood.clone();
            // The server stops reading once its answers back up; so does this write.
            writer.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            std::thread::spawn(move || writer.write_all(flood.as_bytes()));
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let (status, _, _) = raw_request(addr, "GET", "/healthz", None, &[]);
        assert_eq!(status, 200, "a liveness probe is answered while every slot is held by a non-reader");
    }
    // Each non-reader is closed: displaced, or at its write timeout.
    let deadline = Instant::now() + Duration::from_secs(60);
    let closed = |reason: &str, metrics: &str| {
        let line = format!("provd_connections_closed_total{{reason=\"{reason}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(line.as_str())?.parse::<u64>().ok()).unwrap_or(0)
    };
    let (displaced, timed_out) = loop {
        let (_, _, metrics) = raw_request(addr, "GET", "/metrics", None, &[]);
        let counts = (closed("displaced", &metrics), closed("write_timeout", &metrics));
        if counts.0 + counts.1 >= 8 || Instant::now() > deadline {
            break counts;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // The first probe found every slot held and displaced a non-reader (the
    // next ones may find its slot free again).
    assert!(displaced >= 1, "a probe displaced a non-reader: {displaced}");
    assert!(
        displaced + timed_out >= 8,
        "within 60 s of a 2 s write timeout, all 8 non-readers closed: {displaced} displaced, {timed_out} timed out"
    );
    drop(stalled);
    let _ = child.kill();
    let _ = child.wait();
}

/// The listener is up from the first second: while the service starts
/// (here a bench-18 key is generated, seconds on any machine), `/healthz`
/// answers 200 and `/readyz` 503 saying what start-up is doing; once
/// started, the worker serves as usual on the same address.
#[test]
fn a_starting_worker_is_live_and_says_it_is_starting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("provd.toml");
    std::fs::write(&config, "[[circuits]]\nkind = \"bench\"\nname = \"bench-18\"\n").unwrap();
    let mut child = Command::new(provd_bin())
        .args(["serve", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0", "--backend", "cpu"])
        .env("PROVD_DATA_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    assert!(out.read_line(&mut line).unwrap() > 0, "provd exited before listening");
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("provd starting on http://")
        .and_then(|rest| rest.split(':').take(2).collect::<Vec<_>>().join(":").parse().ok())
        .unwrap_or_else(|| panic!("the first line: {line}"));
    let (status, _, _) = raw_request(addr, "GET", "/healthz", None, &[]);
    assert_eq!(status, 200, "live while starting");
    let (status, head, body) = raw_request(addr, "GET", "/readyz", None, &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("starting: loading the key of circuit bench-18 (1 of 1)"), "{body}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
    let (status, _, _) = raw_request(addr, "GET", "/v1/status", None, &[]);
    assert_eq!(status, 503, "nothing else is served yet");
    // A client that keeps its connection alive across the start.
    let mut kept = std::net::TcpStream::connect(addr).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    // Then it starts, on the same address.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut next = String::new();
        assert!(out.read_line(&mut next).unwrap() > 0, "provd exited while starting");
        if next.starts_with("provd listening on http://") {
            assert!(next.contains(&addr.to_string()), "{next}");
            break;
        }
        assert!(Instant::now() < deadline, "not started within 10 minutes");
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    // Closed once started (well before the 10 s idle timeout), so that it
    // does not go on answering "starting".
    assert!(closed_within(&mut kept, Duration::from_secs(5)), "the start-up connection is let go");
    let (status, _, body) = raw_request(addr, "GET", "/readyz", None, &[]);
    assert_eq!(status, 200, "{body}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A body that stops arriving is refused with 408 once it has sent nothing
/// for `server.body_read_timeout_seconds`, and the connection is let go;
/// one that keeps sending is read to its end.
#[test]
fn a_stalled_request_body_is_refused_in_time() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_serving(dir.path(), "body_read_timeout_seconds = 1\n");
    let body = r#"{"circuit": "bench-14", "partitions": [{"seed": 1}]}"#;
    let head = format!(
        "POST /v1/prove HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body.as_bytes()[..10]).unwrap();
    let t = std::time::Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("body_read_timeout_seconds"), "{reply}");
    assert!(t.elapsed() < Duration::from_secs(5), "refused after {:?}", t.elapsed());
    // A body sent slowly but steadily (a chunk every 300 ms) is read whole.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    for chunk in body.as_bytes().chunks(16) {
        std::thread::sleep(Duration::from_millis(300));
        s.write_all(chunk).unwrap();
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 202"), "{line}");
    let _ = child.kill();
    let _ = child.wait();
}
