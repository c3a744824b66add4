//! The container image as an operator runs it: deploy/Dockerfile built by
//! podman around the binary these tests use (`PROVD_BINARY=prebuilt`), run as
//! its own non-root user with the token as a mounted secret and the data
//! directory on a named volume. Its shipped configuration starts at once
//! (`/healthz` answers while the key is generated) and a SIGTERM during
//! start-up stops it, as PID 1, within the grace; with a small circuit it
//! becomes ready, proves on the CPU behind its token, serves metrics without
//! one, and drains on SIGTERM.
//!
//! Without podman the test says it is skipped, or fails when
//! PROVD_REQUIRE_CONTAINER is set (CI sets it). PROVD_CONTAINER_BASE names a
//! local Debian bookworm image with python3-pip to build on, for a machine
//! that reaches no container registry (scripts/container-base.sh makes one);
//! without it, the Dockerfile's own base images are pulled.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use provd_e2e::{find, free_port, raw_request, wait_until};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Runs podman with `args`, failing the test with its output when it fails.
fn podman(args: &[&str]) -> Output {
    let out = Command::new("podman").args(args).output().expect("podman runs");
    assert!(
        out.status.success(),
        "podman {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn podman_text(args: &[&str]) -> String {
    String::from_utf8_lossy(&podman(args).stdout).trim().to_string()
}

/// What this test made in podman (image, containers, volume), removed when
/// it ends, failed or not.
struct Made {
    image: String,
    containers: Vec<String>,
    volume: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("podman").args(["rm", "--force", "--time", "0", c]).output();
        }
        let _ = Command::new("podman").args(["volume", "rm", "--force", &self.volume]).output();
        let _ = Command::new("podman").args(["rmi", "--force", &self.image]).output();
    }
}

/// GET `path`, or None while nothing answers on `addr`.
fn get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    let (status, _, body) = raw_request(addr, "GET", path, None, headers);
    Some((status, body))
}

/// Sends SIGTERM (podman's stop), and returns the exit code and the seconds it took.
fn stop(container: &str, grace: u64) -> (i64, f64) {
    let start = Instant::now();
    podman(&["stop", "--time", &grace.to_string(), container]);
    let took = start.elapsed().as_secs_f64();
    let code = podman_text(&["inspect", "--format", "{{.State.ExitCode}}", container]);
    (code.parse().unwrap_or_else(|_| panic!("exit code {code:?}")), took)
}

#[test]
fn the_image_starts_proves_on_the_cpu_behind_its_token_and_stops_on_sigterm() {
    if find("podman").is_none() {
        assert!(
            std::env::var_os("PROVD_REQUIRE_CONTAINER").is_none(),
            "PROVD_REQUIRE_CONTAINER is set and podman is not installed (Debian package podman)"
        );
        eprintln!("skipped: podman not installed (Debian package podman)");
        return;
    }
    let root = repo();
    // The binary the other tests run, stripped where the prebuilt stage looks.
    let staged = root.join("target/container/provd");
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&staged)
        .arg(provd_e2e::provd_bin())
        .status()
        .expect("strip runs");
    assert!(stripped.success(), "strip failed");

    let tag = format!("localhost/provd-test:{}", std::process::id());
    let made = Made {
        image: tag.clone(),
        containers: vec![
            format!("provd-test-starting-{}", std::process::id()),
            format!("provd-test-{}", std::process::id()),
        ],
        volume: format!("provd-test-data-{}", std::process::id()),
    };
    let mut build: Vec<String> =
        ["build", "--network", "host", "--file", "deploy/Dockerfile"].into_iter().map(String::from).collect();
    build.extend(["--build-arg".into(), "PROVD_BINARY=prebuilt".into(), "--tag".into(), tag.clone()]);
    if let Ok(base) = std::env::var("PROVD_CONTAINER_BASE") {
        for arg in ["PYTHON_IMAGE", "RUNTIME_IMAGE"] {
            build.extend(["--build-arg".into(), format!("{arg}={base}")]);
        }
    }
    build.push(root.to_str().unwrap().into());
    podman(&build.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(podman_text(&["image", "inspect", "--format", "{{.Config.User}}", &tag]), "10001:10001");

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("provd-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    // Readable by the image's user, as the Dockerfile's comment asks.
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let secret = format!("{}:/run/secrets/provd-token:ro", token.display());
    let (api, metrics) = (free_port(), free_port());
    let api_addr: std::net::SocketAddr = format!("127.0.0.1:{api}").parse().unwrap();
    let metrics_addr: std::net::SocketAddr = format!("127.0.0.1:{metrics}").parse().unwrap();
    let listen =
        [format!("PROVD_LISTEN=127.0.0.1:{api}"), format!("PROVD_METRICS_LISTEN=127.0.0.1:{metrics}")];
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec!["run", "--detach", "--name", name, "--network", "host", "--volume", &secret];
        for env in &listen {
            args.extend(["--env", env]);
        }
        args.extend(extra);
        args.push(&tag);
        podman(&args);
    };

    // The shipped configuration: bench-20, whose TEST-ONLY key takes minutes
    // to generate here. Listening from the first second, it says it is
    // starting; a SIGTERM then stops it at once, though PID 1 ignores the
    // signals it has no handler for.
    let starting = &made.containers[0];
    run(starting, &[]);
    wait_until(Duration::from_secs(120), "/healthz from the container", || {
        get(api_addr, "/healthz", &[]).is_some_and(|(s, _)| s == 200)
    });
    let (status, body) = get(api_addr, "/readyz", &[]).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("starting"), "{body}");
    let (code, took) = stop(starting, 60);
    assert_ne!(code, 137, "killed after the grace: SIGTERM was ignored during start-up ({took:.1} s)");
    podman(&["rm", starting]);

    // The same image and configuration file with a circuit that starts in
    // seconds, its data on a named volume the non-root user writes to.
    let config = std::fs::read_to_string(root.join("deploy/container/provd.toml")).unwrap();
    assert!(config.contains("\"bench-20\""), "the shipped circuit");
    let small = dir.path().join("provd.toml");
    std::fs::write(&small, config.replace("\"bench-20\"", "\"bench-8\"")).unwrap();
    let mount = format!("{}:/etc/provd/provd.toml:ro", small.display());
    let data = format!("{}:/var/lib/provd", made.volume);
    let serving = &made.containers[1];
    run(serving, &["--volume", &mount, "--volume", &data]);
    let bearer = [("Authorization", "Bearer s3cret")];
    wait_until(Duration::from_secs(600), "/readyz 200 from the container (a bench-8 key generated)", || {
        get(api_addr, "/readyz", &[]).is_some_and(|(s, _)| s == 200)
    });
    let (status, _, _) = raw_request(api_addr, "GET", "/v1/status", None, &[]);
    assert_eq!(status, 401, "the API wants the token");
    let body = r#"{"circuit":"bench-8","partitions":[{"seed":1},{"seed":2}]}"#;
    let (status, _, job) = raw_request(api_addr, "POST", "/v1/prove?wait=true", Some(body), &bearer);
    assert_eq!(status, 200, "{job}");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["state"], "succeeded", "{job}");
    let (status, _, scrape) = raw_request(metrics_addr, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200, "metrics need no token");
    assert!(
        scrape.lines().any(|l| l.starts_with("provd_partitions_total{")
            && l.contains("succeeded")
            && l.ends_with(" 2")),
        "the proofs are counted:\n{scrape}"
    );
    let (code, took) = stop(serving, 60);
    assert_eq!(code, 0, "a drained worker exits 0 ({took:.1} s)");
    let logs = podman(&["logs", serving]);
    let log = format!("{}{}", String::from_utf8_lossy(&logs.stdout), String::from_utf8_lossy(&logs.stderr));
    assert!(log.contains("on backend cpu"), "it says it proves on the CPU:\n{log}");
}
