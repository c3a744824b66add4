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
