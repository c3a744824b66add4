//! The live view in a real browser: headless Chromium (driven through
//! chromedriver's WebDriver API) opens a running `provd demo`, waits until the
//! main chart shows in-flight partitions, checks that it keeps updating and
//! that the console has no errors, and saves a screenshot.

use std::time::{Duration, Instant};

use base64::Engine as _;
use provd_e2e::{raw_request, Server};
use serde_json::{json, Value};

fn find(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.exists()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Driver {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    session: String,
}

impl Driver {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string());
        let (code, _, text) = raw_request(self.addr, method, path, body.as_deref(), &[]);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(code == 200, "{method} {path}: {code} {text}");
        v["value"].clone()
    }

    fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            Some(json!({ "script": js, "args": [] })),
        )
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
    let profile = tempfile::tempdir().unwrap().keep();
    let caps = json!({ "capabilities": { "alwaysMatch": {
        "browserName": "chrome",
        "goog:loggingPrefs": { "browser": "ALL" },
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1400,1100",
                     format!("--user-data-dir={}", profile.display())],
        },
    }}});
    let (code, _, text) = raw_request(addr, "POST", "/session", Some(&caps.to_string()), &[]);
    assert_eq!(code, 200, "new session: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let session = v["value"]["sessionId"].as_str().expect("session id").to_string();
    Driver { child, addr, session }
}

#[test]
fn live_view_shows_partitions_moving() {
    let (Some(chromium), Some(chromedriver)) = (find("chromium"), find("chromedriver")) else {
        assert!(std::env::var_os("PROVD_REQUIRE_BROWSER").is_none(), "chromium and chromedriver required");
        eprintln!(
            "skipped: chromium / chromedriver not installed (Debian packages chromium, chromium-driver)"
        );
        return;
    };
    let server = Server::demo("bench-12");
    let driver = start_browser(&chromium, &chromedriver);
    driver.call(
        "POST",
        &format!("/session/{}/url", driver.session),
        Some(json!({ "url": format!("http://{}/", server.addr) })),
    );

    let probe = "const p = window.provd; if (!p || !p.charts) return null; \
                 return { updates: p.updates, connected: p.connected, \
                          inflight: Math.max(0, ...p.samples.map(p.inFlight)), drawn: p.charts.stages.drawnMax, \
                          jobs: p.jobs.length, title: document.title };";
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let v = driver.script(probe);
        if v["inflight"].as_i64().unwrap_or(0) > 0 && v["drawn"].as_f64().unwrap_or(0.0) > 0.0 {
            break v;
        }
        assert!(Instant::now() < deadline, "the main chart never showed in-flight partitions: {v}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(first["title"], "provd — live");
    assert_eq!(first["connected"], true);
    std::thread::sleep(Duration::from_secs(3));
    let later = driver.script(probe);
    assert!(
        later["updates"].as_i64() > first["updates"].as_i64(),
        "the view stopped updating: {first} → {later}"
    );
    assert!(later["jobs"].as_i64().unwrap_or(0) > 0, "recent jobs table is empty: {later}");

    let logs = driver.call(
        "POST",
        &format!("/session/{}/se/log", driver.session),
        Some(json!({ "type": "browser" })),
    );
    let errors: Vec<&Value> = logs.as_array().unwrap().iter().filter(|e| e["level"] == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");

    let png = driver.call("GET", &format!("/session/{}/screenshot", driver.session), None);
    let png = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let out = std::env::var_os("PROVD_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("provd-dashboard.png"));
    std::fs::write(&out, png).unwrap();
    eprintln!("screenshot: {}", out.display());
}
