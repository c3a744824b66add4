//! Helpers for end-to-end tests: find and run the real `provd` binary.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `provd` binary of this build: `PROVD_BIN`, else the one beside the test
/// executable's `deps/` folder (built by `cargo build --release --bins`).
pub fn provd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PROVD_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target profile directory");
    let bin = dir.join("provd");
    assert!(
        bin.exists(),
        "{} not found: build it first (`cargo build --release --bins`) or set PROVD_BIN",
        bin.display()
    );
    bin
}

/// Runs `provd args…` with a data directory and returns its output.
pub fn provd(data_dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(provd_bin())
        .args(args)
        .env("PROVD_DATA_DIR", data_dir)
        .env("PROVD_LOG", "info")
        .output()
        .expect("provd runs")
}

/// stdout and stderr as text, for assertions and failure messages.
pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A `provd serve` process on a loopback port, killed when dropped.
pub struct Server {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
    pub data_dir: tempfile::TempDir,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `provd serve` with `config` (TOML text) on an ephemeral port,
    /// the CPU backend and a fresh data directory; waits until it listens.
    pub fn start(config: &str, env: &[(&str, &str)]) -> Server {
        use std::io::BufRead;
        let data_dir = tempfile::tempdir().unwrap();
        let config_path = data_dir.path().join("provd.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut cmd = Command::new(provd_bin());
        cmd.args(["serve", "--config"])
            .arg(&config_path)
            .args(["--listen", "127.0.0.1:0", "--backend", "cpu"])
            .env("PROVD_DATA_DIR", data_dir.path())
            .env("PROVD_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("provd starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (err_pipe, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err_pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("provd listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}; stderr: {}", stderr.lock().unwrap()))
            .parse()
            .unwrap();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Server { child, addr, data_dir, stderr }
    }

    /// One request; returns (status, JSON body or Null).
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        self.call_with(method, path, body, &[])
    }

    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, serde_json::Value) {
        let (status, _, body) = raw_request(self.addr, method, path, body, headers);
        (status, serde_json::from_str(&body).unwrap_or(serde_json::Value::Null))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 request; returns (status, headers, body).
pub fn raw_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or("");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}
