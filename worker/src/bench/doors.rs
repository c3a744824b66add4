//! `provd bench doors`: one stream of Filecoin jobs through each front door
//! of one `provd serve` process (this binary, started as a child), HTTP's
//! `POST /v1/prove?wait=true` and cuzk.v1's `Prove`, from the same number of
//! concurrent clients, alternating rounds so that drift hits both doors
//! alike. What it measures: what the gRPC door costs over HTTP's at the
//! same engine (proofs a second, and each request's latency).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use super::vanilla::{VanillaBench, VanillaKind};
use super::{environment, median, print_table, write_json};
use crate::circuits::filecoin::Registered;
use crate::grpc::pb;

pub struct DoorsBench {
    /// The kind proved (its sectors and parameters made as `bench vanilla` makes them).
    pub kind: VanillaKind,
    pub seal: filecoin_proofs_api::RegisteredSealProof,
    /// Jobs per door per round.
    pub jobs: usize,
    /// Clients sending at once, through each door.
    pub concurrency: usize,
    pub rounds: usize,
    /// The served worker's `--backend`.
    pub backend: String,
    pub work_dir: PathBuf,
    pub json: PathBuf,
}

/// The worker this bench started; stopped (SIGTERM, then kill) when dropped.
struct Worker {
    child: std::process::Child,
    http: String,
    grpc: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One round through one door.
struct Round {
    wall: Duration,
    latencies: Vec<Duration>,
    /// One of its proofs, for the verifier.
    proof: Vec<u8>,
}

impl DoorsBench {
    fn start_worker(&self, registered: Registered) -> anyhow::Result<Worker> {
        use std::io::BufRead;
        let config = format!(
            "[[circuits]]\nkind = \"{kind}\"\nname = \"doors\"\nproof = \"{registered}\"\n\
             parameter_cache = \"{params}\"\ntest_only_parameters = true\n\
             [server]\nmax_body_bytes = 67108864\nmax_queued_partitions = {bound}\n\
             [grpc]\nlisten = [\"127.0.0.1:0\"]\n",
            kind = match registered {
                Registered::Seal(_) => "filecoin-porep",
                Registered::Update(_) => "filecoin-snap",
                Registered::WinningPost(_) => "filecoin-winning-post",
                Registered::WindowPost(_) => "filecoin-window-post",
            },
            params = self.work_dir.join("params").display(),
            bound = 4 * self.concurrency.max(64),
        );
        let path = self.work_dir.join("doors.toml");
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(self.work_dir.join("doors-worker.log"))?;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .args(["serve", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--backend", &self.backend, "--data-dir"])
            .arg(self.work_dir.join("doors-data"))
            .env("FIL_PROOFS_PARAMETER_CACHE", self.work_dir.join("params"))
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()?;
        let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let (mut http, mut grpc) = (None, None);
        while http.is_none() {
            let mut line = String::new();
            anyhow::ensure!(
                out.read_line(&mut line)? > 0,
                "the worker exited before it listened: see {}",
                self.work_dir.join("doors-worker.log").display()
            );
            let line = line.trim();
            grpc = grpc.or_else(|| line.strip_prefix("cuzk.v1 gRPC on ").map(str::to_string));
            http = line.strip_prefix("provd listening on ").map(str::to_string);
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let grpc = grpc.ok_or_else(|| anyhow::anyhow!("the worker printed no gRPC address"))?;
        Ok(Worker { child, http: http.expect("read above"), grpc: format!("http://{grpc}") })
    }

    /// `n` jobs through HTTP from `self.concurrency` clients.
    fn http_round(&self, worker: &Worker, input: &Value, n: usize) -> anyhow::Result<Round> {
        let body = json!({ "circuit": "doors", "input": input }).to_string();
        let url = format!("{}/v1/prove?wait=true", worker.http);
        let next = AtomicUsize::new(0);
        let t = Instant::now();
        let answers: Vec<anyhow::Result<(Vec<Duration>, Vec<u8>)>> = std::thread::scope(|s| {
            let clients: Vec<_> = (0..self.concurrency)
                .map(|_| {
                    s.spawn(|| -> anyhow::Result<(Vec<Duration>, Vec<u8>)> {
                        let agent = ureq::Agent::new_with_defaults();
                        let (mut latencies, mut proof) = (Vec::new(), Vec::new());
                        while next.fetch_add(1, Ordering::Relaxed) < n {
                            let t = Instant::now();
                            let job: Value = agent
                                .post(&url)
                                .header("content-type", "application/json")
                                .send(&body)?
                                .body_mut()
                                .read_json()?;
                            latencies.push(t.elapsed());
                            anyhow::ensure!(
                                job["state"] == "succeeded",
                                "an HTTP job did not succeed: {job}"
                            );
                            proof = hex::decode(job["result"]["proof"].as_str().unwrap_or_default())?;
                        }
                        Ok((latencies, proof))
                    })
                })
                .collect();
            clients.into_iter().map(|c| c.join().expect("a client thread")).collect()
        });
        collect(t.elapsed(), answers)
    }

    /// `n` jobs through the gRPC door from `self.concurrency` clients (one
    /// connection each, as separate Curio processes would have).
    fn grpc_round(
        &self,
        worker: &Worker,
        request: &pb::SubmitProofRequest,
        n: usize,
    ) -> anyhow::Result<Round> {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let next = Arc::new(AtomicUsize::new(0));
        let t = Instant::now();
        let answers = runtime.block_on(async {
            let mut clients = tokio::task::JoinSet::new();
            for _ in 0..self.concurrency {
                let (next, request, target) = (next.clone(), request.clone(), worker.grpc.clone());
                clients.spawn(async move {
                    let mut client = pb::proving_engine_client::ProvingEngineClient::connect(target)
                        .await?
                        .max_decoding_message_size(256 << 20)
                        .max_encoding_message_size(256 << 20);
                    let (mut latencies, mut proof) = (Vec::new(), Vec::new());
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let t = Instant::now();
                        let answer = client.prove(pb::ProveRequest { submit: Some(request.clone()) }).await?;
                        latencies.push(t.elapsed());
                        let result = answer.into_inner().result.unwrap_or_default();
                        anyhow::ensure!(
                            result.status == pb::await_proof_response::Status::Completed as i32,
                            "a gRPC job did not complete: {result:?}"
                        );
                        proof = result.proof;
                    }
                    Ok((latencies, proof))
                });
            }
            clients.join_all().await
        });
        collect(t.elapsed(), answers)
    }

    pub fn run(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.jobs > 0 && self.concurrency > 0 && self.rounds > 0,
            "jobs, concurrency and rounds ≥ 1"
        );
        let vanilla = VanillaBench {
            kind: self.kind,
            seal: self.seal,
            runs: 1,
            work_dir: self.work_dir.clone(),
            json: self.json.clone(),
        };
        let case = vanilla.prepared()?;
        let registered = case.kind.filecoin_proof().expect("a Filecoin kind");
        let request = cuzk_request(registered, &case.input)?;
        let worker = self.start_worker(registered)?;
        eprintln!(
            "{registered}: {} constraints; worker on {} (HTTP) and {} (gRPC), backend {}",
            case.kind.constraints(),
            worker.http,
            worker.grpc,
            self.backend
        );
        // Warm-up: each door once at full concurrency (keys on the device,
        // connections open, caches warm).
        let warm = self.concurrency;
        self.http_round(&worker, &case.input, warm)?;
        self.grpc_round(&worker, &request, warm)?;
        let (mut http, mut grpc) = (Vec::new(), Vec::new());
        for _ in 0..self.rounds {
            http.push(self.http_round(&worker, &case.input, self.jobs)?);
            grpc.push(self.grpc_round(&worker, &request, self.jobs)?);
        }
        for (door, rounds) in [("HTTP", &http), ("gRPC", &grpc)] {
            let proof = &rounds.last().expect("a round").proof;
            anyhow::ensure!((case.verify)(proof)?, "a proof through {door} fails filecoin-proofs' verifier");
        }
        drop(worker);
        let rate = |rs: &[Round]| {
            median(&rs.iter().map(|r| self.jobs as f64 / r.wall.as_secs_f64()).collect::<Vec<_>>())
        };
        let latency = |rs: &[Round]| {
            let all: Vec<Duration> = rs.iter().flat_map(|r| r.latencies.iter().copied()).collect();
            median(&all).as_secs_f64() * 1e3
        };
        let (http_rate, grpc_rate) = (rate(&http), rate(&grpc));
        let row = |door: &str, rs: &[Round], ratio: String| {
            vec![
                door.to_string(),
                format!("{:.2}", rate(rs)),
                format!("{:.1}", latency(rs)),
                rs.iter()
                    .map(|r| format!("{:.2}", self.jobs as f64 / r.wall.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(" "),
                ratio,
            ]
        };
        print_table(
            &["door", "proofs/s (median)", "latency ms (median)", "proofs/s per round", "gRPC/HTTP"],
            &[row("HTTP", &http, String::new()), row("gRPC", &grpc, format!("{:.3}", grpc_rate / http_rate))],
        );
        let seconds = |rs: &[Round]| rs.iter().map(|r| r.wall.as_secs_f64()).collect::<Vec<_>>();
        write_json(
            &self.json,
            &json!({
                "benchmark": "doors",
                "environment": environment(),
                "proof": registered.to_string(),
                "constraints": case.kind.constraints(),
                "backend": self.backend,
                "jobs_per_round": self.jobs,
                "concurrency": self.concurrency,
                "rounds": self.rounds,
                "http": { "round_seconds": seconds(&http), "proofs_per_second": http_rate, "median_latency_ms": latency(&http) },
                "grpc": { "round_seconds": seconds(&grpc), "proofs_per_second": grpc_rate, "median_latency_ms": latency(&grpc) },
                "grpc_over_http": grpc_rate / http_rate,
            }),
        )
    }
}

/// The clients' answers as a round: their latencies, and one proof.
fn collect(wall: Duration, answers: Vec<anyhow::Result<(Vec<Duration>, Vec<u8>)>>) -> anyhow::Result<Round> {
    let mut round = Round { wall, latencies: Vec::new(), proof: Vec::new() };
    for answer in answers {
        let (latencies, proof) = answer?;
        round.latencies.extend(latencies);
        if !proof.is_empty() {
            round.proof = proof;
        }
    }
    Ok(round)
}

/// The same job as Curio sends it: `input` (the kind's HTTP input) in the
/// request's fields.
fn cuzk_request(registered: Registered, input: &Value) -> anyhow::Result<pb::SubmitProofRequest> {
    let (kind, number) = crate::grpc::request::naming(registered);
    let bytes = |field: &str| -> anyhow::Result<Vec<u8>> {
        Ok(hex::decode(input[field].as_str().ok_or_else(|| anyhow::anyhow!("no {field} in the input"))?)?)
    };
    let vanilla = |field: &str| -> anyhow::Result<Vec<Vec<u8>>> {
        let list = input[field].as_array().ok_or_else(|| anyhow::anyhow!("no {field} in the input"))?;
        list.iter()
            .map(|v| Ok(base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or_default())?))
            .collect()
    };
    let mut request = pb::SubmitProofRequest {
        proof_kind: kind as i32,
        registered_proof: number,
        miner_id: input["miner_id"].as_u64().unwrap_or(1000),
        vanilla_proofs: vanilla("vanilla_proofs")?,
        ..Default::default()
    };
    match registered {
        Registered::Update(_) => {
            request.comm_r_old = bytes("comm_r_old")?;
            request.comm_r_new = bytes("comm_r_new")?;
            request.comm_d_new = bytes("comm_d_new")?;
        }
        Registered::WindowPost(_) => {
            request.randomness = bytes("randomness")?;
            request.partition_index = input["partition_index"].as_u64().unwrap_or(0) as u32;
        }
        Registered::WinningPost(_) => request.randomness = bytes("randomness")?,
        Registered::Seal(_) => anyhow::bail!("bench doors proves the vanilla-proof kinds"),
    }
    Ok(request)
}
