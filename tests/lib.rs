//! Helpers for end-to-end tests: find and run the real `provd` binary.

use std::path::PathBuf;
use std::process::{Command, Output};

/// How long a test waits for its jobs to end before it fails saying which
/// are still open: minutes on a shared, busy CI machine, where they take
/// seconds on an idle one. A test must not fail because the machine is slow.
pub const JOBS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1800);

/// The `provd` binary of this build: `PROVD_BIN`, else the one beside the test
/// executable's `deps/` folder. `cargo test --release --workspace` builds it
/// (for provd's own integration tests); a run of this package's tests alone
/// needs `cargo build --release --bins` first.
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

/// Metric families that only a GPU worker exports (their `device` label has
/// no value on the CPU backend).
pub const GPU_ONLY_METRICS: [&str; 6] = [
    "provd_gpu_busy_seconds_total",
    "provd_key_layout",
    "provd_gpu_memory_used_bytes",
    "provd_gpu_memory_total_bytes",
    "provd_key_uploads_total",
    "provd_key_evictions_total",
];

/// Metric families that only a fleet worker exports (`[jobs] store` a
/// PostgreSQL URL); tests/fleet.rs checks them in a fleet worker's scrape.
pub const FLEET_ONLY_METRICS: [&str; 9] = [
    "provd_fleet_claims_total",
    "provd_fleet_lease_expiries_total",
    "provd_fleet_leases_lost_total",
    "provd_fleet_retries_total",
    "provd_fleet_results_fenced_total",
    "provd_fleet_claimed_partitions",
    "provd_fleet_queue_partitions",
    "provd_fleet_oldest_queued_seconds",
    "provd_fleet_database_up",
];

/// A program on PATH.
pub fn find(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.exists()))
}

/// Polls `ok` every quarter second until it holds, failing the test after
/// `limit` (generous: for a busy two-core machine) saying what it waited for.
pub fn wait_until(limit: std::time::Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "waited {} s for {what}", limit.as_secs());
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// A loopback port free at the moment of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A partition of a job document: its proof (bellperson's bytes, from hex)
/// and its public inputs.
pub fn partition_proof(p: &serde_json::Value) -> (provd::groth16::Proof, Vec<blstrs::Scalar>) {
    let bytes = hex::decode(p["proof"].as_str().unwrap_or_else(|| panic!("no proof in {p}"))).unwrap();
    let inputs = p["public_inputs"]
        .as_array()
        .unwrap_or_else(|| panic!("no public inputs in {p}"))
        .iter()
        .map(|v| provd::groth16::parse_scalar(v.as_str().unwrap()).unwrap())
        .collect();
    (provd::groth16::Proof::from_bytes(&bytes).unwrap(), inputs)
}

/// Where every test binary keeps the TEST-ONLY Filecoin parameters it
/// shares with the others (and the constraint matrices recorded beside
/// them): the first binary that needs a circuit's generates them, the rest
/// read them. Held by [`SharedParameters`] while a process writes to it.
pub fn filecoin_parameter_cache() -> PathBuf {
    provd_bin().parent().expect("the profile directory").join("test-fixtures").join("filecoin-parameters")
}

/// The shared parameter cache, held by this process alone (a lock file):
/// two test processes never generate the same circuit's parameters at once,
/// whatever runs them (cargo test runs binaries one after another; a runner
/// that runs them side by side waits here).
pub struct SharedParameters {
    _lock: std::fs::File,
    pub dir: PathBuf,
}

impl SharedParameters {
    pub fn hold() -> Self {
        let dir = filecoin_parameter_cache();
        std::fs::create_dir_all(&dir).unwrap();
        let lock = std::fs::File::create(dir.join(".lock")).unwrap();
        lock.lock().expect("the shared parameter cache's lock");
        Self { _lock: lock, dir }
    }
}

impl SharedParameters {
    /// `proof`'s circuit loaded as a worker loads it from this cache: its
    /// TEST-ONLY parameters and recorded matrices generated here when this
    /// is the first process to need them, read when not.
    pub fn load(
        &self,
        proof: provd::circuits::filecoin::Registered,
    ) -> std::sync::Arc<dyn provd::circuits::CircuitKind> {
        use filecoin_proofs_api::PoStType;
        use provd::circuits::filecoin::post::FilecoinPostKind;
        use provd::circuits::filecoin::snap::FilecoinSnapKind;
        use provd::circuits::filecoin::{FilecoinConfig, FilecoinPorepKind, Registered};
        use std::sync::Arc;
        fn config<P>(dir: &std::path::Path, proof: P) -> FilecoinConfig<P> {
            FilecoinConfig {
                name: "fixture".into(),
                proof,
                parameter_cache: Some(dir.to_path_buf()),
                test_only_parameters: true,
                synthesis: Default::default(),
                matrices_cache: None,
                priority: None,
            }
        }
        let dir = &self.dir;
        match proof {
            Registered::Seal(p) => Arc::new(FilecoinPorepKind::load(&config(dir, p)).unwrap()),
            Registered::Update(p) => Arc::new(FilecoinSnapKind::load(&config(dir, p)).unwrap()),
            Registered::WinningPost(p) => {
                Arc::new(FilecoinPostKind::load(&config(dir, p), PoStType::Winning).unwrap())
            }
            Registered::WindowPost(p) => {
                Arc::new(FilecoinPostKind::load(&config(dir, p), PoStType::Window).unwrap())
            }
        }
    }
}

/// Runs the Python cuzk.v1 client (tests/cuzk/client.py, stubs generated
/// from provd's .proto) on `plan`, a list of calls; its results, one per call.
/// `None` when Python's grpcio or grpcio-tools is missing, unless
/// PROVD_REQUIRE_GRPC_CLIENT is set (CI sets it): then that fails the test.
pub fn cuzk_client(plan: &serde_json::Value) -> Option<Vec<serde_json::Value>> {
    let have = Command::new("python3").args(["-c", "import grpc, grpc_tools"]).output();
    if !have.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("PROVD_REQUIRE_GRPC_CLIENT").is_none(),
            "python3 with grpcio and grpcio-tools is required (pip install grpcio grpcio-tools)"
        );
        eprintln!(
            "skipped: python3 with grpcio and grpcio-tools not found (pip install grpcio grpcio-tools)"
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/cuzk/client.py");
    let out = Command::new("python3").arg(client).arg(&path).output().expect("python3 runs");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "the Python client failed: {stderr}");
    Some(serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("the client's results: {e}: {stdout}")))
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
    /// The cuzk.v1 gRPC door's addresses, as provd printed them
    /// ("127.0.0.1:9820", "unix:///…"); empty without one.
    pub grpc: Vec<String>,
    pub data_dir: tempfile::TempDir,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `provd serve` with `config` (TOML text) on an ephemeral port,
    /// the CPU backend and a fresh data directory; waits until it listens.
    pub fn start(config: &str, env: &[(&str, &str)]) -> Server {
        Self::try_start(config, env, "cpu")
            .unwrap_or_else(|stderr| panic!("provd exited before listening; stderr: {stderr}"))
    }

    /// As [`Server::start`] on `backend`; `Err(stderr)` if provd exits
    /// before it listens.
    pub fn try_start(config: &str, env: &[(&str, &str)], backend: &str) -> Result<Server, String> {
        Self::try_start_in(config, env, backend, tempfile::tempdir().unwrap())
    }

    /// As [`Server::try_start`] on an existing data directory (a restart).
    pub fn try_start_in(
        config: &str,
        env: &[(&str, &str)],
        backend: &str,
        data_dir: tempfile::TempDir,
    ) -> Result<Server, String> {
        let config_path = data_dir.path().join("provd.toml");
        std::fs::write(&config_path, config).unwrap();
        let path = config_path.to_string_lossy().into_owned();
        Self::try_launch(
            &["serve", "--config", &path, "--listen", "127.0.0.1:0", "--backend", backend],
            data_dir,
            env,
        )
    }

    /// Starts `provd demo` on `circuit` (CPU backend, ephemeral port).
    pub fn demo(circuit: &str) -> Server {
        let data_dir = tempfile::tempdir().unwrap();
        Self::try_launch(
            &["demo", "--circuit", circuit, "--listen", "127.0.0.1:0", "--backend", "cpu"],
            data_dir,
            &[],
        )
        .unwrap_or_else(|stderr| panic!("provd exited before listening; stderr: {stderr}"))
    }

    fn try_launch(
        args: &[&str],
        data_dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        use std::io::BufRead;
        let mut cmd = Command::new(provd_bin());
        cmd.args(args)
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
        let mut grpc = Vec::new();
        let addr = loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                let _ = child.wait();
                std::thread::sleep(std::time::Duration::from_millis(100)); // the stderr reader's last lines
                return Err(stderr.lock().unwrap().clone());
            }
            if let Some(at) = line.trim().strip_prefix("cuzk.v1 gRPC on ") {
                grpc = at.split(", ").map(str::to_string).collect();
            }
            if let Some(a) = line.trim().strip_prefix("provd listening on http://") {
                break a.parse().unwrap();
            }
        };
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Ok(Server { child, addr, grpc, data_dir, stderr })
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

    /// The sum of a metric's samples in `/metrics` whose labels include the
    /// ones given: `provd_jobs_total` (every series),
    /// `provd_partitions_total{outcome="succeeded"}` (every circuit's); 0 if
    /// there are none.
    pub fn metric(&self, selector: &str) -> f64 {
        let (name, wanted) = match selector.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}').split(',').collect::<Vec<_>>()),
            None => (selector, Vec::new()),
        };
        let (_, _, text) = raw_request(self.addr, "GET", "/metrics", None, &[]);
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let rest = l.strip_prefix(name)?;
                let (labels, value) = match rest.strip_prefix('{') {
                    Some(r) => r.split_once("} ")?,
                    None => ("", rest.strip_prefix(' ')?),
                };
                let labels: Vec<&str> = labels.split(',').collect();
                wanted.iter().all(|w| labels.contains(w)).then(|| value.trim().parse::<f64>().ok())?
            })
            .sum()
    }

    /// A verifier for `circuit`'s verifying key as this worker serves it.
    pub fn verifier(&self, circuit: &str) -> provd::groth16::Verifier {
        let vk = request(self.addr, "GET", &format!("/v1/circuits/{circuit}/verifying-key"), None, &[]);
        assert_eq!(vk.status, 200, "the verifying key of {circuit}");
        provd::groth16::Verifier::new(&provd::groth16::VerifyingKey::from_bytes(&vk.body).unwrap())
    }

    /// Submits a job of `circuit` whose kind splits its `input` itself: the
    /// submission's status and the refusal, or the accepted job's document
    /// once it has ended (polled, up to [`JOBS_DEADLINE`]).
    pub fn prove_input(&self, circuit: &str, input: &serde_json::Value) -> (u16, serde_json::Value) {
        let body = serde_json::json!({ "circuit": circuit, "input": input });
        let (status, reply) = self.call("POST", "/v1/prove", Some(&body.to_string()));
        if status != 202 {
            return (status, reply);
        }
        let id = reply["job_id"].as_str().expect("an accepted job's id").to_string();
        let mut done = self.wait_all([&id], JOBS_DEADLINE);
        (status, done.remove(&id).expect("the job waited for"))
    }

    /// Polls until every job in `ids` has ended (each must be known: 200);
    /// their documents, by id.
    pub fn wait_all<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a String>,
        limit: std::time::Duration,
    ) -> std::collections::BTreeMap<String, serde_json::Value> {
        let ids: Vec<&String> = ids.into_iter().collect();
        let deadline = std::time::Instant::now() + limit;
        let mut done = std::collections::BTreeMap::new();
        loop {
            let mut open = Vec::new();
            let waiting: Vec<&String> = ids.iter().copied().filter(|id| !done.contains_key(*id)).collect();
            for id in waiting {
                let (status, job) = self.call("GET", &format!("/v1/jobs/{id}"), None);
                assert_eq!(status, 200, "job {id} is unknown: {job}");
                if job["state"] != "queued" && job["state"] != "running" {
                    done.insert(id.clone(), job);
                } else {
                    open.push(job);
                }
            }
            if open.is_empty() {
                return done;
            }
            // The jobs still open, as the API shows them, say where they stopped.
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {} jobs ended within {limit:?}; still open: {}",
                done.len(),
                ids.len(),
                serde_json::Value::from(open)
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Server {
    /// Kills the process with SIGKILL (no shutdown, no flush) and hands back
    /// its data directory, for a restart on it.
    pub fn kill_9(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap())
    }

    /// Stops the worker with SIGTERM (it drains) and waits up to `within`
    /// for it to exit 0; returns its data directory.
    pub fn terminate(mut self, within: std::time::Duration) -> tempfile::TempDir {
        let term = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(term.success());
        let deadline = std::time::Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "still running {within:?} after SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0), "{}", self.stderr());
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, head as "name: value" lines, body bytes.
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// One request through ureq (statuses are answers, not errors), with a JSON
/// content type on bodies unless `headers` name another.
pub fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Reply {
    request_bytes(addr, method, path, body.map(str::as_bytes), headers)
}

/// As [`request`], with a body of bytes.
pub fn request_bytes(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(120)))
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(format!("http://{addr}{path}"));
    if body.is_some() && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        req = req.header("Content-Type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body.unwrap_or_default().to_vec()).expect("a valid request");
    let mut res = agent.run(req).unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"));
    let head: String = res
        .headers()
        .iter()
        .map(|(k, v)| format!("{}: {}\n", k.as_str(), v.to_str().unwrap_or("")))
        .collect();
    let body = res.body_mut().with_config().limit(1 << 30).read_to_vec().unwrap_or_default();
    Reply { status: res.status().as_u16(), head, body }
}

/// As [`request`], with the body as text: (status, head, body).
pub fn raw_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let r = request(addr, method, path, body, headers);
    (r.status, r.head, String::from_utf8_lossy(&r.body).into_owned())
}

/// A PostgreSQL server of its own (Debian's package), on a loopback port,
/// its data in a temporary directory; stopped when dropped. As root (CI),
/// it runs as the `postgres` user, since PostgreSQL refuses root.
pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    running: bool,
}

impl Postgres {
    /// Starts one, or `None` (with the reason printed) when PostgreSQL is not
    /// installed and `PROVD_REQUIRE_POSTGRES` is unset; with it set, a
    /// missing PostgreSQL fails the test.
    pub fn start() -> Option<Postgres> {
        let Some(bin) = Self::bin_dir() else {
            assert!(
                std::env::var_os("PROVD_REQUIRE_POSTGRES").is_none(),
                "PROVD_REQUIRE_POSTGRES is set and no PostgreSQL is installed (initdb not found)"
            );
            eprintln!(
                "skipped: PostgreSQL is not installed (apt-get install postgresql; scripts/test-all.sh does)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sock")).unwrap();
        if Self::as_root() {
            let owned =
                Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status().unwrap();
            assert!(owned.success(), "chown of the PostgreSQL directory");
        }
        let mut pg = Postgres { bin, dir, port: free_port(), running: false };
        let data = pg.dir.path().join("data");
        let out = pg
            .command("initdb")
            .args(["-A", "trust", "-U", "provd", "--no-sync", "-E", "UTF8", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        // free_port's port is free when it answers, not necessarily when the
        // server binds it (other tests start listeners meanwhile): on that
        // collision, another port, up to four times.
        for retry in 1.. {
            match pg.try_resume() {
                Err(e) if e.contains("Address already in use") && retry <= 4 => pg.port = free_port(),
                started => {
                    started.unwrap_or_else(|e| panic!("{e}"));
                    break;
                }
            }
        }
        Some(pg)
    }

    /// Where initdb and postgres are: `PROVD_POSTGRES_BIN`, Debian's
    /// /usr/lib/postgresql/N/bin (newest), or PATH.
    fn bin_dir() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("PROVD_POSTGRES_BIN") {
            return Some(d.into());
        }
        let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|d| d.join("initdb").exists())
            .collect();
        debian.sort_by_key(|d| {
            d.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()).unwrap_or(0)
        });
        debian.pop().or_else(|| find("initdb").and_then(|p| p.parent().map(PathBuf::from)))
    }

    fn as_root() -> bool {
        Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        if Self::as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// The URL provd connects with.
    pub fn url(&self) -> String {
        format!("postgres://provd@127.0.0.1:{}/postgres?connect_timeout=2", self.port)
    }

    /// A client for the test's own queries.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("the test connects to PostgreSQL")
    }

    /// Stops the server (fast shutdown: clients are disconnected), as an outage.
    pub fn stop(&mut self) {
        if self.running {
            let data = self.dir.path().join("data");
            let _ = self.command("pg_ctl").args(["stop", "-m", "fast", "-w", "-D"]).arg(&data).output();
            self.running = false;
        }
    }

    /// Starts the server (again) on its data directory and port, and waits
    /// until it takes connections.
    pub fn resume(&mut self) {
        self.try_resume().unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Postgres::resume`], or pg_ctl's output and the server's log.
    fn try_resume(&mut self) -> Result<(), String> {
        let (data, log) = (self.dir.path().join("data"), self.dir.path().join("postgres.log"));
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100 -c unix_socket_directories={} -p {}",
            self.dir.path().join("sock").display(),
            self.port
        );
        let out = self
            .command("pg_ctl")
            .args(["start", "-w", "-t", "30", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-o", &options])
            .output()
            .unwrap();
        if !out.status.success() {
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            // Cleared, so that a retry's error shows only its own start's lines.
            let _ = std::fs::remove_file(&log);
            return Err(format!("pg_ctl start: {}{log_text}", String::from_utf8_lossy(&out.stderr)));
        }
        self.running = true;
        Ok(())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An nginx on a loopback port serving `server_block` (an nginx `server { … }`
/// as docs give it) as its only site, its files in a temporary directory;
/// killed when dropped.
pub struct Nginx {
    child: std::process::Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts one with `server_block`, where `{port}` stands for its listening
    /// port; or `None` (with the reason printed) when nginx is not installed
    /// and `PROVD_REQUIRE_NGINX` is unset; with it set, a missing nginx fails
    /// the test.
    pub fn start(server_block: &str) -> Option<Nginx> {
        // Debian's, where a PATH without /usr/sbin would miss it.
        let bin = if std::path::Path::new("/usr/sbin/nginx").exists() { "/usr/sbin/nginx" } else { "nginx" };
        if Command::new(bin).arg("-v").output().is_err() {
            assert!(
                std::env::var_os("PROVD_REQUIRE_NGINX").is_none(),
                "PROVD_REQUIRE_NGINX is set and nginx is not installed"
            );
            eprintln!("skipped: nginx is not installed (apt-get install nginx; scripts/test-all.sh does)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // Workers run as nobody under root: the temporary files' directory is theirs too.
        let temp = dir.path().join("temp");
        std::fs::create_dir(&temp).unwrap();
        std::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        // free_port's port may be taken before nginx binds it: another, up to four times.
        for retry in 1.. {
            let port = free_port();
            let site = server_block.replace("{port}", &port.to_string());
            std::fs::write(dir.path().join("site.conf"), site).unwrap();
            let conf = format!(
                "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{}}\n\
                 http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/temp/body;\n  \
                 proxy_temp_path {d}/temp/proxy;\n  fastcgi_temp_path {d}/temp/fastcgi;\n  \
                 uwsgi_temp_path {d}/temp/uwsgi;\n  scgi_temp_path {d}/temp/scgi;\n  include {d}/site.conf;\n}}\n"
            );
            std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
            let mut child = Command::new(bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .args(["-g", "daemon off;"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("nginx starts");
            // Listening, or exited (a port taken, a bad config): a minute for either.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let exited = loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break false;
                }
                assert!(std::time::Instant::now() < deadline, "nginx neither listened nor exited in 60 s");
                std::thread::sleep(std::time::Duration::from_millis(50));
            };
            if !exited {
                return Some(Nginx { child, port, dir });
            }
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            assert!(log.contains("Address already in use") && retry <= 4, "nginx did not start: {log}");
        }
        unreachable!()
    }

    /// Its error log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
