//! What operators get: the alert rules (promtool's checks and unit tests),
//! the Grafana dashboard and the rules against a real scrape of provd, every
//! panel's query in a real Prometheus scraping a running demo, and an alert
//! on a provd over its memory threshold delivered by a real Alertmanager to a
//! webhook on loopback. Prometheus and Alertmanager are Debian's packages
//! (`prometheus`, `prometheus-alertmanager`); without them these tests say
//! they are skipped, or fail when PROVD_REQUIRE_PROMETHEUS is set (CI sets it).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use provd_e2e::{find, free_port, request, wait_until, Server};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A tool from Debian's packages, or None after saying the test is skipped.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = find(name);
    if found.is_none() {
        assert!(
            std::env::var_os("PROVD_REQUIRE_PROMETHEUS").is_none(),
            "{name} required (Debian package {package})"
        );
        eprintln!("skipped: {name} not installed (Debian package {package})");
    }
    found
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("grafana/dashboards/provd.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// (panel title, expression) for every query of every panel.
fn panel_queries() -> Vec<(String, String)> {
    let d = dashboard();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((p["title"].as_str().unwrap().to_string(), t["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// Metric names (provd_*, process_*) an expression or a rules file uses.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if boundary && (rest.starts_with("provd_") || rest.starts_with("process_")) {
            let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            names.insert(rest[..len].to_string());
            i += len;
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool", "prometheus") else { return };
    let dir = repo().join("deploy/prometheus");
    for args in [&["check", "rules", "provd-rules.yml"][..], &["test", "rules", "provd-rules.test.yml"]] {
        let out = Command::new(&promtool).args(args).current_dir(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // every alert has a unit test, and every runbook anchor a section in docs/operations.md
    let rules = std::fs::read_to_string(dir.join("provd-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("provd-rules.test.yml")).unwrap();
    let runbook = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap().to_lowercase();
    for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "{alert} has no unit test");
        assert!(
            runbook.contains(&format!("### {}", alert.to_lowercase())),
            "{alert} is not in docs/operations.md"
        );
    }
}

#[test]
fn the_dashboard_is_provisionable() {
    let d = dashboard();
    assert_eq!(d["uid"], "provd-workers", "a pinned uid");
    let vars: Vec<&str> =
        d["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vars, ["datasource", "instance", "circuit"]);
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel ids are unique");
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            for t in p["targets"].as_array().unwrap() {
                assert!(
                    t["expr"].as_str().unwrap().contains("$instance"),
                    "{}: filters by $instance",
                    p["title"]
                );
                // A table of labels (the Build panel) needs one row per
                // series now, not a time series per label set.
                if p["type"] == "table" {
                    assert_eq!((&t["format"], &t["instant"]), (&Value::from("table"), &Value::from(true)));
                }
            }
        }
    }
}

/// Every metric a panel or an alert uses is in a real scrape of provd after a job.
#[test]
fn every_metric_the_dashboard_and_alerts_use_exists() {
    let server = Server::start("[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n", &[]);
    let (code, job) = server.call(
        "POST",
        "/v1/prove?wait=true",
        Some(r#"{"circuit":"bench-8","partitions":[{"seed":1}]}"#),
    );
    assert_eq!(code, 200, "{job}");
    let scrape = String::from_utf8(request(server.addr, "GET", "/metrics", None, &[]).body).unwrap();
    let mut exported = BTreeSet::new();
    for l in scrape.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let mut it = l.split(' ');
        let (name, kind) = (it.next().unwrap(), it.next().unwrap());
        exported.insert(name.to_string());
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                exported.insert(format!("{name}{suffix}"));
            }
        }
    }
    // The rules' expressions (their annotations name labels, not metrics).
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/provd-rules.yml")).unwrap();
    let exprs: Vec<&str> = rules.lines().filter(|l| !l.trim_start().starts_with("runbook_url:")).collect();
    let mut used = metric_names(&exprs.join("\n"));
    for (_, expr) in panel_queries() {
        used.extend(metric_names(&expr));
    }
    // Families with a `device` label have no series on the CPU backend;
    // tests/gpu_service.rs checks them in a scrape of a GPU worker, and
    // tests/fleet.rs the fleet's in a fleet worker's.
    let missing: Vec<_> = used
        .iter()
        .filter(|m| {
            !exported.contains(*m)
                && !provd_e2e::GPU_ONLY_METRICS.contains(&m.as_str())
                && !provd_e2e::FLEET_ONLY_METRICS.contains(&m.as_str())
        })
        .collect();
    assert!(missing.is_empty(), "used but not exported: {missing:?}");
    assert!(used.len() > 20, "{used:?}");
}

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Prometheus on a free loopback port with `config`, its data in `dir`.
/// free_port's port can be taken by another test's listener before
/// Prometheus binds it: on that, another port, up to four times. Any other
/// exit, or no readiness in 30 s (generous, for a busy two-core machine),
/// fails with Prometheus's log.
fn prometheus(bin: &Path, dir: &Path, config: &str) -> (Running, std::net::SocketAddr) {
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let log = dir.join("prometheus.log");
    for retry in 1.. {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus starts");
        let mut running = Running(child);
        let start = std::time::Instant::now();
        loop {
            if ready(addr) {
                return (running, addr);
            }
            let text = || std::fs::read_to_string(&log).unwrap_or_default();
            if running.0.try_wait().unwrap().is_some() {
                let text = text();
                assert!(text.contains("address already in use") && retry <= 4, "prometheus exited: {text}");
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "waited 30 s for prometheus ready: {}",
                text()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    unreachable!("the loop returns or panics")
}

/// Whether a Prometheus or Alertmanager on `addr` answers /-/ready.
fn ready(addr: std::net::SocketAddr) -> bool {
    std::net::TcpStream::connect(addr).is_ok() && request(addr, "GET", "/-/ready", None, &[]).status == 200
}

fn query(prom: std::net::SocketAddr, expr: &str) -> Value {
    let q: String = url_encode(expr);
    let r = request(prom, "GET", &format!("/api/v1/query?query={q}"), None, &[]);
    serde_json::from_slice(&r.body).unwrap()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Grafana's variables as a query sees them for one worker.
fn as_grafana_would(expr: &str) -> String {
    expr.replace("$instance", ".*").replace("$circuit", ".*").replace("$__rate_interval", "20s")
}

#[test]
fn every_panel_returns_data_from_a_real_prometheus_scraping_a_demo() {
    let Some(bin) = tool("prometheus", "prometheus") else { return };
    let demo = Server::demo("bench-8");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
         scrape_configs:\n  - job_name: provd\n    static_configs: [{{ targets: ['{}'] }}]\n",
        demo.addr
    );
    let (_prom, prom) = prometheus(&bin, dir.path(), &config);
    // Enough samples for rate() over 20 s, and proofs completed meanwhile.
    wait_until(Duration::from_secs(60), "completed partitions in Prometheus", || {
        let v = query(prom, "sum(increase(provd_partitions_total{outcome=\"succeeded\"}[20s])) > 0");
        v["data"]["result"].as_array().is_some_and(|r| !r.is_empty())
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut empty = Vec::new();
    let queries = panel_queries();
    assert!(queries.len() > 20, "the dashboard's queries were found: {}", queries.len());
    for (title, expr) in queries {
        let v = query(prom, &as_grafana_would(&expr));
        assert_eq!(v["status"], "success", "{title}: {expr}: {v}");
        let has_data = v["data"]["result"].as_array().is_some_and(|r| !r.is_empty());
        // The GPU row has nothing to show on a worker proving on the CPU,
        // nor the fleet row outside fleet mode.
        if !has_data && !title.starts_with("GPU") && !title.starts_with("Fleet") {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(empty.is_empty(), "panels without data:\n{}", empty.join("\n"));
    // The Build table's own query gives the version and commit `provd
    // --version` prints, and the backend, as the columns it keeps.
    let version =
        String::from_utf8(Command::new(provd_e2e::provd_bin()).arg("--version").output().unwrap().stdout)
            .unwrap();
    let (_, expr) = panel_queries().into_iter().find(|(title, _)| title == "Build").expect("the Build panel");
    let build = query(prom, &as_grafana_would(&expr));
    let labels = &build["data"]["result"][0]["metric"];
    let shown = format!(
        "provd {} (commit {})",
        labels["version"].as_str().unwrap_or("?"),
        labels["commit"].as_str().unwrap_or("?")
    );
    assert_eq!(shown, version.trim(), "{build}");
    assert!(labels["backend"].as_str().is_some_and(|b| !b.is_empty()), "{build}");
}

/// A worker whose API needs a token, scraped by a real Prometheus through
/// its metrics listener (`server.metrics_listen`), which serves the metrics
/// and nothing else without the token: Prometheus never holds the API's
/// token, and annotation-driven scrapes (which send none) work.
#[test]
fn prometheus_scrapes_a_token_protected_worker_through_its_metrics_listener() {
    let Some(bin) = tool("prometheus", "prometheus") else { return };
    let port = free_port();
    let server = Server::start(
        &format!("[server]\nmetrics_listen = \"127.0.0.1:{port}\"\n[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n"),
        &[("PROVD_AUTH_TOKEN", "s3cret")],
    );
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (status, _, _) = provd_e2e::raw_request(server.addr, "GET", "/metrics", None, &[]);
    assert_eq!(status, 401, "the API's /metrics still needs the token");
    let (status, _, text) = provd_e2e::raw_request(metrics, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    assert!(text.contains("provd_memory_limit_bytes "), "{text}");
    for path in ["/v1/status", "/v1/jobs/x", "/"] {
        let (status, _, _) = provd_e2e::raw_request(metrics, "GET", path, None, &[]);
        assert_eq!(status, 404, "{path} is not served on the metrics listener");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
         scrape_configs:\n  - job_name: provd\n    static_configs: [{{ targets: ['{metrics}'] }}]\n"
    );
    let (_prom, prom) = prometheus(&bin, dir.path(), &config);
    wait_until(Duration::from_secs(60), "provd_build_info scraped without a token", || {
        let v = query(prom, "up{job=\"provd\"} == 1 and on (instance) provd_build_info");
        v["data"]["result"].as_array().is_some_and(|r| !r.is_empty())
    });
}

/// A webhook receiver on loopback: collects the bodies POSTed to it.
fn webhook() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_ok() {
                sink.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
            }
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (addr, got)
}

/// A provd whose resident memory is over 92% of its (tiny, configured)
/// memory limit, scraped by Prometheus with the shipped rules (their `for:`
/// shortened to seconds so the test ends), whose Alertmanager delivers
/// ProvdMemoryNearLimit to a webhook, its runbook link absolute, on the
/// worker itself.
#[test]
fn an_alert_on_memory_reaches_a_webhook_through_alertmanager() {
    let (Some(prom_bin), Some(am_bin)) =
        (tool("prometheus", "prometheus"), tool("prometheus-alertmanager", "prometheus-alertmanager"))
    else {
        return;
    };
    let server = Server::start(
        "[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n[pipeline]\nmemory_limit = \"8MiB\"\n",
        &[],
    );
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    std::fs::write(
        dir.path().join("alertmanager.yml"),
        format!(
            "route: {{ receiver: hook, group_by: [alertname], group_wait: 1s, group_interval: 1s, repeat_interval: 1h }}\n\
             receivers:\n  - name: hook\n    webhook_configs: [{{ url: 'http://{hook}/alerts' }}]\n"
        ),
    )
    .unwrap();
    let am: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _am = Running(
        Command::new(am_bin)
            .arg(format!("--config.file={}", dir.path().join("alertmanager.yml").display()))
            .arg(format!("--storage.path={}", dir.path().join("am").display()))
            .arg(format!("--web.listen-address={am}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("alertmanager.log")).unwrap())
            .spawn()
            .expect("alertmanager starts"),
    );
    wait_until(Duration::from_secs(30), "alertmanager ready", || ready(am));
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/provd-rules.yml")).unwrap();
    let rules: String = rules
        .lines()
        .map(|l| if l.trim_start().starts_with("for: ") { "        for: 2s" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.path().join("provd-rules.yml"), rules).unwrap();
    let config = format!(
        "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
         rule_files: ['{}']\n\
         alerting: {{ alertmanagers: [{{ static_configs: [{{ targets: ['{am}'] }}] }}] }}\n\
         scrape_configs:\n  - job_name: provd\n    static_configs: [{{ targets: ['{}'] }}]\n",
        dir.path().join("provd-rules.yml").display(),
        server.addr
    );
    let (_prom, _) = prometheus(&prom_bin, dir.path(), &config);
    let deadline = Instant::now() + Duration::from_secs(90);
    let alert = loop {
        let found = received.lock().unwrap().iter().find(|b| b.contains("ProvdMemoryNearLimit")).cloned();
        if let Some(body) = found {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no alert delivered in 90 s; prometheus log:\n{}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let v: Value = serde_json::from_str(&alert).unwrap();
    let a = &v["alerts"][0];
    assert_eq!(a["status"], "firing", "{v}");
    assert_eq!(a["labels"]["instance"], server.addr.to_string());
    assert_eq!(a["labels"]["severity"], "critical");
    let runbook = a["annotations"]["runbook_url"].as_str().unwrap();
    assert_eq!(runbook, format!("http://{}/runbook#provdmemorynearlimit", server.addr));
    let (status, _, text) = provd_e2e::raw_request(server.addr, "GET", "/runbook", None, &[]);
    assert_eq!(status, 200);
    assert!(text.contains("### ProvdMemoryNearLimit"), "the link leads to the alert's section");
}

/// The systemd unit's sandbox scores at most 4 in `systemd-analyze
/// security` (8.5 before it was hardened), and keeps Filecoin's parameter
/// cache readable: `PrivateTmp` gives the unit a /var/tmp of its own, so
/// the host's `/var/tmp/filecoin-proof-parameters` must be bound into it
/// (read-only), and nothing may hide it again. (Where systemd runs as PID 1
/// a transient unit could prove the read; CI's containers have none, so the
/// properties are checked.)
#[test]
fn the_systemd_unit_is_sandboxed_and_reads_the_parameter_cache() {
    let Some(analyze) = tool("systemd-analyze", "systemd") else { return };
    let path = repo().join("deploy/systemd/provd.service");
    let out = Command::new(analyze).args(["security", "--offline=true"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for provd.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}{}", String::from_utf8_lossy(&out.stderr)));
    assert!(exposure <= 4.0, "exposure {exposure} > 4:\n{text}");
    let unit = std::fs::read_to_string(&path).unwrap();
    let values = |key: &str| -> Vec<String> {
        unit.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_string).collect()
    };
    let cache = "/var/tmp/filecoin-proof-parameters";
    assert_eq!(values("PrivateTmp"), ["true"]);
    assert!(
        values("BindReadOnlyPaths").iter().any(|v| v.trim_start_matches('-') == cache),
        "the parameter cache is bound into the unit's private /var/tmp"
    );
    for hiding in ["InaccessiblePaths", "TemporaryFileSystem"] {
        assert!(
            values(hiding)
                .iter()
                .all(|v| !cache.starts_with(v.trim_start_matches('-').split(':').next().unwrap())),
            "{hiding} hides the parameter cache"
        );
    }
    assert!(values("ProcSubset").is_empty(), "provd reads /proc/meminfo for its memory limit");
    assert!(
        values("PrivateDevices").iter().all(|v| v != "true"),
        "the NVIDIA device nodes must stay reachable"
    );
}

/// The container image's own configuration (deploy/container/provd.toml,
/// which deploy/Dockerfile installs and runs by default) starts a worker
/// that answers `/readyz`, wants the token from the mounted secret on the
/// API and serves metrics without it. (No container engine runs in CI: the
/// file is run as the image runs it, with the secret's path, the metrics
/// port and the circuit's size swapped for the test's.)
#[test]
fn the_container_configuration_starts_behind_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("provd-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let metrics_port = free_port();
    let text = std::fs::read_to_string(repo().join("deploy/container/provd.toml")).unwrap();
    for needed in
        ["listen = \"0.0.0.0:8080\"", "metrics_listen = \"0.0.0.0:9464\"", "/run/secrets/provd-token"]
    {
        assert!(text.contains(needed), "{needed}");
    }
    let text = text
        .replace("/run/secrets/provd-token", token.to_str().unwrap())
        .replace("0.0.0.0:9464", &format!("127.0.0.1:{metrics_port}"))
        .replace("bench-20", "bench-8");
    let server = Server::start(&text, &[]);
    let bearer = [("Authorization", "Bearer s3cret")];
    let (status, _, body) = provd_e2e::raw_request(server.addr, "GET", "/readyz", None, &bearer);
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = provd_e2e::raw_request(server.addr, "GET", "/v1/status", None, &[]);
    assert_eq!(status, 401, "the API wants the token");
    let (status, _, _) = provd_e2e::raw_request(server.addr, "GET", "/v1/status", None, &bearer);
    assert_eq!(status, 200);
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let (status, _, _) = provd_e2e::raw_request(metrics, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200, "metrics need no token");
}
