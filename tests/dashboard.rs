//! The live view in a real browser: headless Chromium (driven through
//! chromedriver's WebDriver API) opens a running `provd demo`, waits until the
//! main chart shows in-flight partitions, checks that it keeps updating and
//! that the console has no errors, and saves a screenshot.

use std::time::{Duration, Instant};

use base64::Engine as _;
use provd_e2e::{find, free_port, raw_request, Server};
use serde_json::{json, Value};

struct Driver {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    session: String,
    /// Chromium's profile, removed after the browser is gone.
    _profile: tempfile::TempDir,
}

impl Driver {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string());
        let (code, _, text) = raw_request(self.addr, method, path, body.as_deref(), &[]);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(code == 200, "{method} {path}: {code} {text}");
        v["value"].clone()
    }

    /// A command of this session (`path` after /session/{id}).
    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn open(&self, url: String) -> Value {
        self.session_call("POST", "/url", Some(json!({ "url": url })))
    }

    fn script(&self, js: &str) -> Value {
        self.session_call("POST", "/execute/sync", Some(json!({ "script": js, "args": [] })))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = raw_request(self.addr, "DELETE", &format!("/session/{}", self.session), None, &[]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_browser(chromium: &std::path::Path, chromedriver: &std::path::Path) -> Driver {
    let port = free_port();
    let child = std::process::Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let profile = tempfile::tempdir().unwrap();
    let caps = json!({ "capabilities": { "alwaysMatch": {
        "browserName": "chrome",
        "goog:loggingPrefs": { "browser": "ALL" },
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1400,1100",
                     format!("--user-data-dir={}", profile.path().display())],
        },
    }}});
    let (code, _, text) = raw_request(addr, "POST", "/session", Some(&caps.to_string()), &[]);
    assert_eq!(code, 200, "new session: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let session = v["value"]["sessionId"].as_str().expect("session id").to_string();
    Driver { child, addr, session, _profile: profile }
}

/// Chromium and chromedriver, or None after saying why the test is skipped.
fn browser() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (find("chromium"), find("chromedriver")) else {
        assert!(std::env::var_os("PROVD_REQUIRE_BROWSER").is_none(), "chromium and chromedriver required");
        eprintln!(
            "skipped: chromium / chromedriver not installed (Debian packages chromium, chromium-driver)"
        );
        return None;
    };
    Some((chromium, chromedriver))
}

/// Polls `js` until `done` accepts its value, for up to `secs` seconds.
fn wait_until(driver: &Driver, js: &str, secs: u64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = driver.script(js);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn live_view_asks_for_the_token_when_auth_is_on() {
    let Some((chromium, chromedriver)) = browser() else { return };
    let server = Server::start(
        "[[circuits]]\nkind = \"bench\"\nname = \"bench-8\"\n",
        &[("PROVD_AUTH_TOKEN", "s3cret")],
    );
    let driver = start_browser(&chromium, &chromedriver);
    let probe = "const p = window.provd; if (!p) return null; \
                 return { connected: p.connected, updates: p.updates, needsToken: p.needsToken, \
                          form: !document.getElementById('auth').hidden, hash: location.hash };";
    // no token: the prompt shows, nothing streams
    driver.open(format!("http://{}/", server.addr));
    let v = wait_until(&driver, probe, 20, "no token prompt", |v| v["form"] == true);
    assert_eq!((v["connected"].clone(), v["needsToken"].clone()), (json!(false), json!(true)), "{v}");
    // a wrong token typed in: refused, the prompt says so
    let type_token = |t: &str| {
        driver.script(&format!(
            "document.getElementById('token').value = '{t}'; \
             document.getElementById('auth').requestSubmit(); return true;"
        ))
    };
    type_token("wrong");
    wait_until(&driver, "return document.getElementById('auth-msg').textContent;", 20, "wrong token", |v| {
        v.as_str().is_some_and(|s| s.contains("refused"))
    });
    // the right one: live, snapshots arriving
    type_token("s3cret");
    let v = wait_until(&driver, probe, 20, "never went live", |v| {
        v["connected"] == true && v["updates"].as_i64() > Some(1)
    });
    assert_eq!(v["form"], false, "{v}");
    // a fresh tab given the token in the fragment: live at once, fragment removed from the address
    driver.session_call("POST", "/window/new", Some(json!({ "type": "tab" })));
    let handles = driver.session_call("GET", "/window/handles", None);
    let newest = handles.as_array().unwrap().last().unwrap().clone();
    driver.session_call("POST", "/window", Some(json!({ "handle": newest })));
    driver.open(format!("http://{}/#token=s3cret", server.addr));
    let v = wait_until(&driver, probe, 20, "fragment token", |v| {
        v["connected"] == true && v["updates"].as_i64() > Some(0)
    });
    assert_eq!(v["hash"], "", "{v}");
    // the server never saw the token in a URL
    assert!(!server.stderr().contains("s3cret"), "token in the server log");
}

#[test]
fn live_view_shows_partitions_moving() {
    let Some((chromium, chromedriver)) = browser() else { return };
    let server = Server::demo("bench-12");
    let driver = start_browser(&chromium, &chromedriver);
    driver.open(format!("http://{}/", server.addr));

    let probe = "const p = window.provd; if (!p || !p.charts) return null; \
                 return { updates: p.updates, connected: p.connected, \
                          inflight: Math.max(0, ...p.samples.map(p.inFlight)), drawn: p.charts.stages.drawnMax, \
                          jobs: p.jobs.length, title: document.title };";
    let first = wait_until(&driver, probe, 60, "the main chart never showed in-flight partitions", |v| {
        v["inflight"].as_i64().unwrap_or(0) > 0 && v["drawn"].as_f64().unwrap_or(0.0) > 0.0
    });
    assert_eq!(first["title"], "provd — live");
    assert_eq!(first["connected"], true);
    std::thread::sleep(Duration::from_secs(3));
    let later = driver.script(probe);
    assert!(
        later["updates"].as_i64() > first["updates"].as_i64(),
        "the view stopped updating: {first} → {later}"
    );
    assert!(later["jobs"].as_i64().unwrap_or(0) > 0, "recent jobs table is empty: {later}");

    // The panels an operator tunes with, worded for the backend in use (the CPU here).
    let panels = "const p = window.provd, c = p.charts, last = p.samples[p.samples.length - 1];                   const text = (id) => document.getElementById(id).textContent;                   return { backend: text('backend'), stages: text('l-stages'), queue: text('k-queue-label'),                            gpuHidden: document.getElementById('gpu-panel').hidden,                            fleetDisplay: getComputedStyle(document.getElementById('k-fleet-box')).display,                            memory: text('l-memory'), buffers: c.buffers.spec.series.map((s) => s.name),                            keyBytes: last.key_bytes, budget: last.budget_bytes, memoryMax: c.memory.drawnMax,                            rss: last.rss_bytes, offScale: c.memory.offScaleNow,                            rssOver: document.getElementById('k-rss').classList.contains('over'),                            bufferColours: new Set(c.buffers.spec.series.map((s) => s.color)).size,                            bufferStacked: c.buffers.spec.stacked,                            priorityHeader: document.querySelector('#jobs thead th:nth-child(3)').textContent,                            priority: document.querySelector('#jobs tbody tr td:nth-child(3)').textContent };";
    let v = wait_until(&driver, panels, 20, "backend wording", |v| {
        v["backend"].as_str().is_some_and(|b| b.contains("cpu"))
    });
    assert_eq!(v["backend"], "backend: cpu", "{v}");
    let stages = v["stages"].as_str().unwrap();
    assert!(
        stages.contains("prove_start (cpu)")
            && stages.contains("prove_finish (cpu)")
            && !stages.contains("GPU")
            && !stages.contains("CPU"),
        "no GPU wording without a GPU: {v}"
    );
    assert_eq!(v["queue"], "queue to the cpu worker", "{v}");
    assert_eq!(v["gpuHidden"], true, "no GPU utilisation panel without a GPU: {v}");
    // Hidden is not displayed, whatever layout rule the box's class has.
    assert_eq!(v["fleetDisplay"], "none", "no fleet box on a worker that is not in a fleet: {v}");
    assert!(v["memory"].as_str().unwrap().contains("keys"), "{v}");
    assert_eq!(
        v["buffers"],
        json!(["synth", "a/b/c", "aux", "density", "pending"]),
        "every buffer class: {v}"
    );
    assert!(v["keyBytes"].as_u64() > Some(0), "{v}");
    assert_eq!(
        (v["priorityHeader"].as_str(), v["priority"].as_str()),
        (Some("priority"), Some("normal")),
        "{v}"
    );
    // The demo uses a small part of its budget: the chart is scaled to what
    // is used (RSS on it), and the budget is a label above it, not a line
    // that flattens everything else to zero.
    let (max, rss, budget) =
        (v["memoryMax"].as_f64().unwrap(), v["rss"].as_f64().unwrap(), v["budget"].as_f64().unwrap());
    assert!(rss <= max && max < budget, "the memory chart is scaled to use, not the budget: {v}");
    assert_eq!(v["offScale"], json!(["budget"]), "the budget is labelled off the scale: {v}");
    assert_eq!(v["rssOver"], false, "RSS under the budget is not marked: {v}");
    assert_eq!(
        (v["bufferColours"].as_u64(), v["bufferStacked"].as_bool()),
        (Some(5), Some(true)),
        "each buffer class its own colour, stacked so that none hides another: {v}"
    );

    let logs = driver.session_call("POST", "/se/log", Some(json!({ "type": "browser" })));
    let errors: Vec<&Value> = logs.as_array().unwrap().iter().filter(|e| e["level"] == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");

    let png = driver.session_call("GET", "/screenshot", None);
    let png = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let out = std::env::var_os("PROVD_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("provd-dashboard.png"));
    std::fs::write(&out, png).unwrap();
    eprintln!("screenshot: {}", out.display());
}
