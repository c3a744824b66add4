//! The `provd` command line.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};

use provd::backend::{BackendChoice, CudaOptions};
use provd::circuits::key_cache;
use provd::circuits::{Builtin, CircuitConfig};
use provd::{bench, default_data_dir};

#[derive(Parser)]
#[command(name = "provd", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("PROVD_COMMIT"), ")"), about = "GPU proving worker: split Groth16 over BLS12-381")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Where cached keys and compiled kernels live.
    #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
    data_dir: PathBuf,
    /// auto: the GPU if one is usable, else the CPU (and say why).
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// On a CUDA backend, where B's G2 MSM runs (`serve` takes gpu.b_g2_msm from its config).
    #[arg(long, value_enum)]
    b_g2: Option<provd::backend::G2Placement>,
    /// On a CUDA backend, how a key's G1 bases sit on the device (`serve` takes gpu.bases from its config).
    #[arg(long, value_enum)]
    bases: Option<provd::backend::BasesLayout>,
    /// On a CUDA backend, where a, b and c of recorded circuits are computed (`serve` takes gpu.products from its config).
    #[arg(long, value_enum)]
    products: Option<provd::backend::ProductsPlacement>,
}

impl Common {
    /// One device (the first), one proof at a time: the commands other than
    /// `serve` and `bench pipeline` prove one after another on one.
    fn cuda_options(&self) -> CudaOptions {
        CudaOptions {
            b_g2_msm: self.b_g2.unwrap_or_default(),
            bases: self.bases.unwrap_or_default(),
            products: self.products.unwrap_or_default(),
            devices: provd::backend::DeviceSet::List(vec![0]),
            partitions_in_flight: provd::backend::InFlight::One,
            ..CudaOptions::default()
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Prove one witness of a built-in circuit and verify the proof; prints
    /// the proof (hex) and its public inputs, and with --proof/--public
    /// writes them as `provd verify` reads them.
    Prove {
        #[arg(long, default_value = "bench-16")]
        circuit: Builtin,
        /// Seed of the bench witness.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the proof here (hex of bellperson's 192 bytes).
        #[arg(long)]
        proof: Option<PathBuf>,
        /// Write the public inputs here (a JSON array of "0x…" strings).
        #[arg(long)]
        public: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Run the proving service (HTTP API, metrics, live view).
    Serve {
        /// Config file (see provd.example.toml); without one, the defaults.
        #[arg(long, env = "PROVD_CONFIG")]
        config: Option<PathBuf>,
        /// Overrides server.listen.
        #[arg(long, env = "PROVD_LISTEN")]
        listen: Option<std::net::SocketAddr>,
        /// Overrides server.metrics_listen (the token-free /metrics listener).
        #[arg(long, env = "PROVD_METRICS_LISTEN")]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Where the cuzk.v1 gRPC door (Curio's protocol) listens, in place of
        /// grpc.listen: host:port or unix:///path/to.sock; repeat for several.
        #[arg(long = "grpc-listen", env = "PROVD_GRPC_LISTEN", value_delimiter = ',')]
        grpc_listen: Vec<provd::config::GrpcAddress>,
        #[command(flatten)]
        common: Common,
    },
    /// The service on a built-in circuit with a client feeding it jobs over
    /// HTTP: watch the gauges and the live view.
    Demo {
        #[arg(long, default_value = "bench-14")]
        circuit: Builtin,
        /// Partitions per job the demo client submits.
        #[arg(long, default_value_t = 4)]
        partitions: usize,
        #[arg(long, env = "PROVD_LISTEN", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        #[command(flatten)]
        common: Common,
    },
    /// Proving keys.
    Params {
        #[command(subcommand)]
        command: ParamsCommand,
    },
    /// Verifying keys.
    Vk {
        #[command(subcommand)]
        command: VkCommand,
    },
    /// Check a proof against a verifying key and public inputs: prints
    /// "valid" and exits 0, or says why not and exits 1 (2: unreadable input).
    Verify {
        /// Verifying key in bellperson's encoding (`provd vk export`, or
        /// GET /v1/circuits/{name}/verifying-key).
        #[arg(long)]
        vk: PathBuf,
        /// The proof: bellperson's 192 bytes, raw or as hex (as /v1/jobs returns it).
        #[arg(long)]
        proof: PathBuf,
        /// The public inputs: a JSON array of "0x…" hex or decimal strings.
        #[arg(long)]
        public: PathBuf,
    },
    /// circom circuits set up with snarkjs: drop-ins for `snarkjs groth16 ...`.
    Groth16 {
        #[command(subcommand)]
        command: Groth16Command,
    },
    /// Benchmarks: each prints a table and writes JSON.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Subcommand)]
enum Groth16Command {
    /// As `snarkjs groth16 prove`: a BLS12-381 zkey and a witness in, snarkjs's
    /// proof.json and public.json out (the proof verified before it is written).
    Prove {
        zkey: PathBuf,
        wtns: PathBuf,
        proof: PathBuf,
        public: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// As `snarkjs zkey export verificationkey`: verification_key.json for a zkey.
    ExportVk { zkey: PathBuf, out: PathBuf },
    /// TEST-ONLY: a zkey for a circom `.r1cs` from fresh random toxic waste
    /// (whoever runs it can forge proofs), in seconds where snarkjs's setup
    /// takes hours; snarkjs proves with it and verifies its proofs.
    SetupTestOnly { r1cs: PathBuf, zkey: PathBuf },
}

#[derive(Subcommand)]
enum ParamsCommand {
    /// Generate (TEST-ONLY) and cache the key of a built-in circuit.
    Gen {
        #[arg(long)]
        circuit: Builtin,
        /// Regenerate even if a cached key exists.
        #[arg(long)]
        force: bool,
        /// Also time bellperson's generate_random_parameters on the same circuit.
        #[arg(long, value_parser = ["bellperson"])]
        vs: Option<String>,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum VkCommand {
    /// Write a served circuit's verifying key to a file (or stdout).
    Export {
        /// The circuit's name in the config (or a built-in bench-K without one).
        #[arg(long)]
        circuit: String,
        /// Config file naming the circuit and its key (see provd.example.toml).
        #[arg(long, env = "PROVD_CONFIG")]
        config: Option<PathBuf>,
        /// Encoding: one the circuit's kind offers (default: its first, bellperson's).
        #[arg(long)]
        encoding: Option<String>,
        /// Output file; `-` or absent: stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Whole proofs, optionally against bellperson's prover.
    Prove {
        #[arg(long, default_value = "bench-16")]
        circuit: Builtin,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Prove with bellperson too, same circuit and key, interleaved.
        #[arg(long, value_parser = ["bellperson"])]
        vs: Option<String>,
        /// What synthesis by recorded matrices is timed against.
        #[arg(long, value_enum, default_value_t = bench::prove::SynthesisBaseline::Recorder)]
        baseline: bench::prove::SynthesisBaseline,
        #[arg(long, default_value = "bench-results/prove.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// A circom circuit's proof from its zkey and witness, against `snarkjs groth16 prove`.
    Circom {
        #[arg(long)]
        zkey: PathBuf,
        #[arg(long)]
        wtns: PathBuf,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The snarkjs command to time beside provd (e.g. node_modules/.bin/snarkjs).
        #[arg(long)]
        snarkjs: Option<PathBuf>,
        #[arg(long, default_value = "bench-results/circom.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Many jobs through the pipeline engine: throughput, stage busy time, peak gauges.
    Pipeline {
        #[arg(long, default_value = "bench-14")]
        circuit: Builtin,
        #[arg(long, default_value_t = 20)]
        jobs: usize,
        #[arg(long, default_value_t = 4)]
        partitions: usize,
        /// Overrides pipeline.partition_permits.
        #[arg(long)]
        permits: Option<usize>,
        /// Overrides pipeline.gpu_queue_capacity.
        #[arg(long)]
        queue: Option<usize>,
        /// CUDA devices to spread the partitions over: "all" or ordinals ("0,1").
        #[arg(long, default_value = "0")]
        devices: String,
        /// Partitions in prove_start on each GPU at once, 1 or 2 (as gpu.partitions_in_flight).
        #[arg(long, default_value_t = provd::backend::InFlight::default())]
        in_flight: provd::backend::InFlight,
        /// A soak: sample RSS, device memory and the buffer gauges every
        /// this many seconds, print them and how far they moved after warm-up.
        #[arg(long)]
        sample_every: Option<f64>,
        #[arg(long, default_value = "bench-results/pipeline.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// A critical job (one partition) arriving into a saturated stream of
    /// normal work: its latency against an idle worker, and against the
    /// same job sent as normal (first come first served), in one run.
    Lane {
        /// The urgent job's circuit: bench-K (a 32 GiB WinningPoSt is 2^22
        /// constraints), or a Filecoin kind proved from vanilla proofs
        /// (filecoin-winning-post, …) at 2 KiB, its sectors sealed in --work-dir.
        #[arg(long, default_value = "bench-14")]
        critical: String,
        /// The stream's circuit (larger partitions, as sealing's).
        #[arg(long, default_value = "bench-16")]
        stream: Builtin,
        /// Urgent jobs timed in each scenario (3 at most first come first served).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Where a Filecoin urgent job's sectors and parameters are kept.
        #[arg(long, default_value = "bench-results/vanilla-work")]
        work_dir: PathBuf,
        #[arg(long, default_value = "bench-results/lane.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Filecoin PoRep C2 of a sector sealed here (TEST-ONLY parameters),
    /// against filecoin-proofs' own seal_commit_phase2.
    #[cfg(feature = "filecoin")]
    Porep {
        /// The registered seal proof (its sector size), e.g. StackedDrg512MiBV1_1.
        #[arg(long, default_value = "StackedDrg2KiBV1_1")]
        proof: String,
        #[arg(long, default_value_t = 2)]
        runs: usize,
        /// Keeps the sealed sector, the parameter cache and the parent cache between runs.
        #[arg(long, default_value = "bench-results/porep-work")]
        work_dir: PathBuf,
        /// Time filecoin-proofs' own C2 beside provd's.
        #[arg(long, value_parser = ["filecoin-proofs"])]
        vs: Option<String>,
        /// How partitions are synthesized: "matrices" (recorded once) or "recorder".
        #[arg(long, default_value = "matrices")]
        synthesis: String,
        /// After the timed runs, this many copies of the sector submitted at
        /// once: the steady stream's seconds a sector (0: none).
        #[arg(long, default_value_t = 0)]
        stream: usize,
        /// Caps GPU 0 to this much free memory for the whole run with a
        /// ballast beside it (`provd bench ballast`): a smaller card's,
        /// physically (4GiB: a 512 MiB sector's key streams, its plain bases
        /// and a resident proof's buffers not fitting).
        #[arg(long, value_parser = byte_size)]
        device_memory: Option<u64>,
        #[arg(long, default_value = "bench-results/porep.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// A Filecoin kind proved from vanilla proofs (SnapDeals, WinningPoSt,
    /// WindowPoSt) at one sector size, sectors sealed here (TEST-ONLY
    /// parameters), against filecoin-proofs' own CPU prover.
    #[cfg(feature = "filecoin")]
    Vanilla {
        /// filecoin-snap, filecoin-winning-post or filecoin-window-post.
        #[arg(long, default_value = "filecoin-winning-post")]
        kind: String,
        /// The sector size, as the registered seal proof it is sealed with.
        #[arg(long, default_value = "StackedDrg2KiBV1_1")]
        seal: String,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Keeps the sealed sectors, the parameter cache and the parent cache between runs.
        #[arg(long, default_value = "bench-results/vanilla-work")]
        work_dir: PathBuf,
        #[arg(long, default_value = "bench-results/vanilla.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// The same stream of Filecoin jobs through each front door of one
    /// `provd serve` (HTTP and the cuzk.v1 gRPC door), from the same number
    /// of concurrent clients: what the gRPC door costs over HTTP.
    #[cfg(feature = "grpc")]
    Doors {
        /// filecoin-snap, filecoin-winning-post or filecoin-window-post.
        #[arg(long, default_value = "filecoin-window-post")]
        kind: String,
        /// The sector size, as the registered seal proof it is sealed with.
        #[arg(long, default_value = "StackedDrg2KiBV1_1")]
        seal: String,
        /// Jobs per door per round.
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        /// Clients sending at once through each door.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Rounds, alternating the doors (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Keeps the sealed sectors and the parameter cache between runs.
        #[arg(long, default_value = "bench-results/vanilla-work")]
        work_dir: PathBuf,
        #[arg(long, default_value = "bench-results/doors.json")]
        json: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Each Filecoin kind's circuit at a sector size, counted (constraints,
    /// variables, domain) with the parameter file size it implies: nothing
    /// loaded or proved.
    #[cfg(feature = "filecoin")]
    Sizes {
        /// The sector size, as a registered seal proof.
        #[arg(long, default_value = "StackedDrg32GiBV1_1")]
        seal: String,
        #[arg(long, default_value = "bench-results/sizes.json")]
        json: PathBuf,
    },
    /// The host's pieces of a PoRep partition at a sector size's real shape
    /// (a C1 output drawn at random: benchmarks only, nothing proved):
    /// recording and reading the matrices, the witness in parts and whole,
    /// the host products.
    #[cfg(feature = "filecoin")]
    PorepShape {
        /// The registered seal proof (its sector size), e.g. StackedDrg32GiBV1_1.
        #[arg(long, default_value = "StackedDrg32GiBV1_1")]
        proof: String,
        /// Partitions whose witness is computed in parts (median reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Holds the matrix store (tens of GiB at 32 GiB).
        #[arg(long, default_value = "bench-results/porep-shape-work")]
        work_dir: PathBuf,
        /// Read the store an earlier run left rather than record afresh.
        #[arg(long)]
        keep_store: bool,
        /// Skip the whole circuit's witness on one thread (and the check
        /// that the witness in parts is the same), for runs that measure the
        /// device.
        #[arg(long)]
        skip_whole_witness: bool,
        /// Then prove the last partition this many times (after a warm-up)
        /// on the backend with a timing key of the circuit's shape (repeated
        /// points: no proof of anything), each step timed; 0: none.
        #[arg(long, default_value_t = 0)]
        prove_runs: usize,
        /// Partitions in synthesis at once in the projected stream (the
        /// default pipeline.partition_permits; fewer where the memory budget
        /// admits fewer).
        #[arg(long, default_value_t = 4)]
        in_flight: usize,
        /// Then this many sectors of synthetic C1 outputs submitted at once
        /// to the real engine with the timing key (proofs not verified, not
        /// proofs): the steady stream's seconds a sector, peak RSS against
        /// the gauges, each buffer class's peak; 0: none.
        #[arg(long, default_value_t = 0)]
        sectors: usize,
        /// The engine's pipeline.partition_permits for that stream; several
        /// (4,12,28) run one stream each, one after the other, with the same
        /// key and matrices.
        #[arg(long, value_delimiter = ',', default_value = "4")]
        permits: Vec<usize>,
        /// Caps GPU 0 to this much free memory (16GiB, 24GiB, 32GiB) for the
        /// whole run with a ballast beside it (`provd bench ballast`): a
        /// smaller card's, physically.
        #[arg(long, value_parser = byte_size)]
        device_memory: Option<u64>,
        /// Partitions in prove_start on the GPU at once in the stream (as
        /// gpu.partitions_in_flight; the service's default).
        #[arg(long, default_value_t = provd::backend::InFlight::default())]
        gpu_in_flight: provd::backend::InFlight,
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "bench-results/porep-shape.json")]
        json: PathBuf,
    },
    /// GPU MSMs: G1 with bases resident (plain and shifted) and streamed from
    /// pinned memory, or G2 (--g2), beside blst on the CPU.
    Msm {
        /// log2 sizes, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "20,22,24,26")]
        sizes: Vec<u32>,
        /// Sizes at which to time blst's CPU Pippenger too (and check equality).
        #[arg(long, value_delimiter = ',', default_value = "20,22")]
        cpu_sizes: Vec<u32>,
        #[arg(long, default_value_t = 7)]
        runs: usize,
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        #[arg(long, default_value = "bench-results/msm.json")]
        json: PathBuf,
        /// Time the G2 MSM (the B query) instead of G1: resident bases against blst.
        #[arg(long)]
        g2: bool,
        /// The scalars' mix: random 255-bit, or a PoRep witness's (mostly 0 and 1).
        #[arg(long, value_enum, default_value_t)]
        scalars: bench::msm::ScalarMix,
        /// Freed device memory the allocator's pool keeps mapped across
        /// synchronisations, e.g. 0 or 8GiB (default: provd's own setting).
        #[arg(long, value_parser = byte_size)]
        keep_freed: Option<u64>,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
    /// The host-to-device copy rate out of page-locked memory, allocated so
    /// and page-locked in place (a streamed key's bases), whole and a
    /// streamed MSM's chunk at a time.
    Link {
        /// Bytes of each copy, e.g. 4GiB.
        #[arg(long, value_parser = byte_size, default_value = "4GiB")]
        bytes: u64,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value = "bench-results/link.json")]
        json: PathBuf,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
    /// Takes all of GPU 0's memory but --device-memory and holds it until
    /// its standard input closes: a provd started beside it meets a card of
    /// that size (16GiB, 24GiB, 32GiB), physically.
    Ballast {
        /// What to leave free, e.g. 16GiB.
        #[arg(long, value_parser = byte_size)]
        device_memory: u64,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
    /// GPU NTTs over Fr (forward, natural order, and the H chain).
    Ntt {
        /// log2 sizes, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "20,22,24,26")]
        sizes: Vec<u32>,
        #[arg(long, default_value_t = 20)]
        runs: usize,
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        #[arg(long, default_value = "bench-results/ntt.json")]
        json: PathBuf,
        #[arg(long, env = "PROVD_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            // Not eprintln!: it panics when stderr is gone.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("error: {e:#}\n").as_bytes());
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<std::process::ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PROVD_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(|| provd::telemetry::logging::LossyStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    provd::telemetry::logging::install_panic_hook();
    match Cli::parse().command {
        Command::Prove { circuit, seed, proof, public, common } => {
            let key = key_cache::load_or_generate(&common.data_dir, circuit)?;
            let prover =
                provd::Prover::with_options(common.backend, &common.data_dir, &common.cuda_options())?;
            let t = Instant::now();
            let proved = prover.prove(&key, circuit.circuit(Some(seed)))?;
            let proof_hex = hex::encode(proved.proof.to_bytes());
            let inputs = provd::jobs::journal::inputs_to_text(&proved.public_inputs);
            println!(
                "{circuit}: proof verified ({} backend, {:.1} ms): {proof_hex}\npublic inputs: {inputs}",
                prover.backend_name(),
                t.elapsed().as_secs_f64() * 1e3,
            );
            for (path, text) in [(proof, proof_hex), (public, inputs)] {
                if let Some(path) = path {
                    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
                }
            }
        }
        Command::Vk { command: VkCommand::Export { circuit, config, encoding, out, data_dir } } => {
            let entry = match config {
                Some(path) => provd::config::Config::load(&path)?
                    .circuits
                    .into_iter()
                    .find(|c| c.name() == circuit)
                    .with_context(|| format!("{} has no circuit named '{circuit}'", path.display()))?,
                None => CircuitConfig::builtin(circuit.parse()?),
            };
            let kind = entry.load(&data_dir)?;
            let encoding = match encoding {
                Some(e) => e.parse().map_err(anyhow::Error::msg)?,
                None => kind.verifying_key_encodings()[0],
            };
            let bytes = kind.verifying_key(encoding).with_context(|| {
                format!("{circuit} has no '{}' encoding of its verifying key", encoding.name())
            })?;
            match out.filter(|p| p.as_os_str() != "-") {
                Some(path) => {
                    std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
                    eprintln!(
                        "{circuit}: verifying key ({}, {} bytes) written to {}",
                        encoding.name(),
                        bytes.len(),
                        path.display()
                    );
                }
                None => {
                    use std::io::IsTerminal;
                    anyhow::ensure!(
                        !std::io::stdout().is_terminal(),
                        "the verifying key is binary: write it to a file (--out vk.bin) or a pipe, not the terminal"
                    );
                    std::io::Write::write_all(&mut std::io::stdout().lock(), &bytes)?
                }
            }
        }
        Command::Verify { vk, proof, public } => return verify(&vk, &proof, &public),
        Command::Groth16 { command } => groth16(command)?,
        Command::Params { command: ParamsCommand::Gen { circuit, force, vs, data_dir } } => {
            let path = key_cache::key_path(&data_dir, circuit);
            if force && path.exists() {
                std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            }
            let t = Instant::now();
            let key = key_cache::load_or_generate(&data_dir, circuit)?;
            println!(
                "{circuit}: key at {} ({:.1} MiB of points) in {:.2} s",
                path.display(),
                key.resident_bytes() as f64 / (1 << 20) as f64,
                t.elapsed().as_secs_f64()
            );
            if vs.is_some() {
                let t = Instant::now();
                bellperson::groth16::generate_random_parameters::<blstrs::Bls12, _, _>(
                    circuit.circuit(None),
                    &mut rand::rngs::OsRng,
                )?;
                println!(
                    "{circuit}: bellperson generate_random_parameters in {:.2} s",
                    t.elapsed().as_secs_f64()
                );
            }
        }
        Command::Bench { command } => bench(command)?,
        Command::Serve { config, listen, metrics_listen, grpc_listen, common } => {
            let mut config = match config {
                Some(path) => provd::config::Config::load(&path)?,
                None => provd::config::Config::default(),
            };
            if let Some(listen) = listen {
                config.server.listen = listen;
            }
            if metrics_listen.is_some() {
                config.server.metrics_listen = metrics_listen;
            }
            if !grpc_listen.is_empty() {
                config.grpc.listen = grpc_listen;
            }
            if let Some(b_g2) = common.b_g2 {
                config.gpu.b_g2_msm = b_g2;
            }
            if let Some(bases) = common.bases {
                config.gpu.bases = bases;
            }
            if let Some(products) = common.products {
                config.gpu.products = products;
            }
            serve(config, common, None)?;
        }
        Command::Demo { circuit, partitions, listen, common } => {
            anyhow::ensure!(partitions > 0, "--partitions must be at least 1");
            let mut config = provd::config::Config::default();
            config.server.listen = listen;
            config.circuits = vec![CircuitConfig::builtin(circuit)];
            serve(config, common, Some((circuit, partitions)))?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `provd verify`: exit 0 for a valid proof, 1 for an invalid one.
fn groth16(command: Groth16Command) -> anyhow::Result<()> {
    use provd::circuits::circom::{self, json, Witness};
    let read_zkey = |path: &PathBuf| {
        circom::read_zkey(path, provd::groth16::PointCheck::OnCurve)
            .with_context(|| format!("reading the zkey {}", path.display()))
    };
    let write_json = |path: &PathBuf, value: &serde_json::Value| {
        let text = serde_json::to_string_pretty(value).expect("JSON values encode");
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    };
    match command {
        Groth16Command::Prove { zkey, wtns, proof, public, common } => {
            let (key, circuit) = read_zkey(&zkey)?;
            let bytes = std::fs::read(&wtns).with_context(|| format!("reading {}", wtns.display()))?;
            let witness = Witness::parse(&bytes, circuit.witness_len())
                .with_context(|| format!("the witness {}", wtns.display()))?;
            let prover =
                provd::Prover::with_options(common.backend, &common.data_dir, &common.cuda_options())?;
            if let Some(why) = prover.fallback_reason() {
                eprintln!("proving on the CPU: {why}");
            }
            let t = Instant::now();
            let proved = prover.prove_synthesized(&key, circuit.synthesize(&witness)?)?;
            write_json(&proof, &json::proof(&proved.proof))?;
            write_json(&public, &json::public(&proved.public_inputs))?;
            eprintln!(
                "proof verified ({} backend, {:.1} ms) and written to {}, public signals to {}",
                prover.backend_name(),
                t.elapsed().as_secs_f64() * 1e3,
                proof.display(),
                public.display()
            );
        }
        Groth16Command::SetupTestOnly { r1cs, zkey } => {
            let t = Instant::now();
            let system = circom::R1cs::read(&r1cs).with_context(|| format!("reading {}", r1cs.display()))?;
            let made = circom::test_only_zkey(&system, &mut rand::rngs::OsRng)?;
            made.write(&zkey).with_context(|| format!("writing {}", zkey.display()))?;
            eprintln!(
                "TEST-ONLY zkey for {} constraints (domain 2^{}) written to {} in {:.2} s",
                system.constraints,
                made.key.domain_size().trailing_zeros(),
                zkey.display(),
                t.elapsed().as_secs_f64()
            );
        }
        Groth16Command::ExportVk { zkey, out } => {
            let (key, _) = read_zkey(&zkey)?;
            write_json(&out, &json::verification_key(&key.vk))?;
        }
    }
    Ok(())
}

fn verify(
    vk: &std::path::Path,
    proof: &std::path::Path,
    public: &std::path::Path,
) -> anyhow::Result<std::process::ExitCode> {
    let read = |p: &std::path::Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let vk =
        provd::groth16::VerifyingKey::from_bytes(&read(vk)?).with_context(|| format!("{}", vk.display()))?;
    let raw = read(proof)?;
    let bytes = if raw.len() == provd::groth16::Proof::BYTES {
        raw
    } else {
        let text = String::from_utf8_lossy(&raw);
        hex::decode(text.trim().trim_matches('"'))
            .with_context(|| format!("{}: neither 192 raw bytes nor hex", proof.display()))?
    };
    let proof = provd::groth16::Proof::from_bytes(&bytes)?;
    let inputs: Vec<String> = serde_json::from_slice(&read(public)?)
        .with_context(|| format!("{}: expected a JSON array of strings", public.display()))?;
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| provd::groth16::parse_scalar(s).map_err(|e| anyhow::anyhow!("public input {i}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    match provd::groth16::Verifier::new(&vk).verify(&proof, &inputs) {
        Ok(()) => {
            println!("valid");
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("invalid: {e}");
            Ok(std::process::ExitCode::from(1))
        }
    }
}

/// Starts the service and serves until SIGTERM/SIGINT; with `demo`, also the
/// in-process client that keeps it busy.
fn serve(
    config: provd::config::Config,
    common: Common,
    demo: Option<(Builtin, usize)>,
) -> anyhow::Result<()> {
    let token = config.checked_auth_token()?;
    let listen = config.server.listen;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Listening from the first second: while the service starts (keys load,
    // kernels compile), /healthz answers and /readyz says so.
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(listen))
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    // The gRPC door's addresses too, so that a taken one fails the start;
    // its calls answer UNAVAILABLE until the service has started.
    let grpc = runtime.block_on(provd::grpc::Listeners::bind(&config.grpc))?;
    provd::telemetry::logging::stdout_line(&format!(
        "provd starting on http://{}: /healthz answers, /readyz says what start-up is doing",
        listener.local_addr()?
    ));
    let progress = provd::service::StartProgress::default();
    let started = provd::grpc::Started::new(progress.clone());
    let (closed, on_closed) = tokio::sync::oneshot::channel::<()>();
    let grpc_door = match grpc.addresses() {
        addresses if addresses.is_empty() => None,
        addresses => {
            provd::telemetry::logging::stdout_line(&format!("  cuzk.v1 gRPC on {}", addresses.join(", ")));
            let until = async move {
                let _ = on_closed.await;
            };
            Some(runtime.spawn(grpc.serve(started.clone(), token.clone(), until)))
        }
    };
    let limits = config.server.clone();
    // On a thread of its own, outside the runtime: the fleet's database
    // client runs a runtime of its own, which cannot start inside this one.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reporting = progress.clone();
    std::thread::Builder::new().name("start".into()).spawn(move || {
        let _ = tx.send(provd::service::Service::start_reporting(
            config,
            &common.data_dir,
            common.backend,
            &reporting,
        ));
    })?;
    // A signal during start-up stops the process: nothing was accepted yet,
    // so nothing is lost (a key being written is renamed into place only
    // once whole). As a container's PID 1, provd would otherwise ignore
    // SIGTERM until start-up ends, minutes for a large key.
    let starting = async {
        tokio::select! {
            started = rx => Some(started),
            () = provd::http::shutdown_signal() => None,
        }
    };
    let Some(started_up) =
        runtime.block_on(provd::http::answer_while_starting(&listener, &limits, &progress, starting))
    else {
        let (step, _) = progress.now();
        tracing::info!("stopped by a signal during start-up, while {step}");
        std::process::exit(0);
    };
    let service =
        started_up.map_err(|_| anyhow::anyhow!("start-up stopped without a result (see the log)"))??;
    started.set(service.clone());
    // The last reference to the service is dropped here, after the runtime:
    // the fleet's database connections run a runtime of their own (the
    // postgres client's), which cannot be shut down from inside this one.
    let held = service.clone();
    let served = runtime.block_on(async move {
        let addr = listener.local_addr()?;
        if let Some((circuit, partitions)) = demo {
            let low_water = 2 * service.config.pipeline.partition_permits;
            std::thread::Builder::new()
                .name("demo-client".into())
                .spawn(move || provd::demo::feed(addr, circuit.to_string(), partitions, low_water))?;
            println!("provd demo: {circuit} on {}; live view at http://{addr}/", service.backend_names());
        }
        // HTTP drains the jobs (both doors' jobs) on SIGTERM; the gRPC door
        // closes after it, so that its waits are answered first.
        let served = provd::http::serve(service, listener, token).await;
        let _ = closed.send(());
        if let Some(door) = grpc_door {
            match tokio::time::timeout(std::time::Duration::from_secs(5), door).await {
                Ok(Ok(Err(e))) => tracing::error!("{e:#}"),
                Ok(Err(e)) => tracing::error!("the gRPC door: {e}"),
                Err(_) => tracing::warn!("gRPC calls still open 5 s after the last job ended; closing them"),
                Ok(Ok(Ok(()))) => {}
            }
        }
        served
    });
    drop(runtime);
    drop(held);
    served
}

fn bench(command: BenchCommand) -> anyhow::Result<()> {
    let gpu = |data_dir: &std::path::Path, what: &str| -> anyhow::Result<_> {
        Ok(provd::backend::CudaBackend::open(0, data_dir, CudaOptions::default())
            .with_context(|| format!("the {what} benchmark needs a GPU"))?
            .gpu())
    };
    match command {
        BenchCommand::Prove { circuit, runs, vs, baseline, json, common } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            let key = key_cache::load_or_generate(&common.data_dir, circuit)?;
            let backend =
                provd::backend::select(common.backend, &common.data_dir, &common.cuda_options())?.first();
            bench::prove::ProveBench { circuit, runs, vs_bellperson: vs.is_some(), baseline, json }
                .run(backend.as_ref(), &key)
        }
        BenchCommand::Circom { zkey, wtns, runs, snarkjs, json, common } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            let selected = provd::backend::select(common.backend, &common.data_dir, &common.cuda_options())?;
            let backend_arg = if selected.gpus.is_empty() { "cpu" } else { "cuda" };
            bench::circom::CircomBench { zkey, wtns, runs, snarkjs, backend_arg, json }
                .run(selected.first().as_ref())
        }
        BenchCommand::Pipeline {
            circuit,
            jobs,
            partitions,
            permits,
            queue,
            devices,
            in_flight,
            sample_every,
            json,
            common,
        } => {
            anyhow::ensure!(jobs > 0 && partitions > 0, "--jobs and --partitions must be at least 1");
            let key = std::sync::Arc::new(key_cache::load_or_generate(&common.data_dir, circuit)?);
            let devices = match devices.as_str() {
                "all" => provd::backend::DeviceSet::All,
                list => provd::backend::DeviceSet::List(
                    list.split(',')
                        .map(|d| d.trim().parse())
                        .collect::<Result<_, _>>()
                        .context("--devices")?,
                ),
            };
            let options = CudaOptions { devices, partitions_in_flight: in_flight, ..common.cuda_options() };
            let selected = provd::backend::select(common.backend, &common.data_dir, &options)?;
            let mut config = provd::pipeline::PipelineConfig::default();
            config.partition_permits = permits.unwrap_or(config.partition_permits);
            config.gpu_queue_capacity = queue.unwrap_or(config.gpu_queue_capacity);
            let sample_every = sample_every
                .map(|s| {
                    anyhow::ensure!(
                        s > 0.0 && s.is_finite(),
                        "--sample-every takes a positive number of seconds"
                    );
                    Ok(std::time::Duration::from_secs_f64(s))
                })
                .transpose()?;
            let gpus = selected.gpus.clone();
            bench::pipeline::PipelineBench { circuit, jobs, partitions, config, json, sample_every, gpus }
                .run(selected.backends, key)
        }
        BenchCommand::Lane { critical, stream, runs, work_dir, json, common } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            let critical = lane_urgent(&critical, &common.data_dir, work_dir)?;
            let stream_key = std::sync::Arc::new(key_cache::load_or_generate(&common.data_dir, stream)?);
            let selected = provd::backend::select(common.backend, &common.data_dir, &common.cuda_options())?;
            let config = provd::pipeline::PipelineConfig::default();
            bench::lane::LaneBench { critical, stream, runs, config, json }.run(selected.backends, stream_key)
        }
        #[cfg(feature = "filecoin")]
        BenchCommand::Porep { proof, runs, work_dir, vs, synthesis, stream, device_memory, json, common } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            let proof = seal_proof(&proof)?;
            // Before the backend opens: nothing of this run may use more.
            let ballast =
                device_memory.map(|m| bench::ballast::Beside::start(m, &common.data_dir)).transpose()?;
            let backends =
                provd::backend::select(common.backend, &common.data_dir, &common.cuda_options())?.backends;
            let synthesis = serde_json::from_value(serde_json::Value::String(synthesis.clone()))
                .map_err(|_| anyhow::anyhow!("--synthesis {synthesis}: \"matrices\" or \"recorder\""))?;
            bench::porep::PorepBench {
                proof,
                runs,
                work_dir,
                vs_filecoin_proofs: vs.is_some(),
                synthesis,
                stream,
                device_cap: ballast.as_ref().map(|b| b.held.clone()),
                json,
            }
            .run(backends)
        }
        #[cfg(feature = "filecoin")]
        BenchCommand::Vanilla { kind, seal, runs, work_dir, json, common } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            let kind = kind.parse().map_err(|e| anyhow::anyhow!("--kind {e}"))?;
            let backends =
                provd::backend::select(common.backend, &common.data_dir, &common.cuda_options())?.backends;
            bench::vanilla::VanillaBench { kind, seal: seal_proof(&seal)?, runs, work_dir, json }
                .run(backends)
        }
        #[cfg(feature = "grpc")]
        BenchCommand::Doors { kind, seal, jobs, concurrency, rounds, work_dir, json, common } => {
            let kind = kind.parse().map_err(|e| anyhow::anyhow!("--kind {e}"))?;
            let backend = match common.backend {
                BackendChoice::Auto => "auto",
                BackendChoice::Cpu => "cpu",
                BackendChoice::Cuda => "cuda",
            }
            .to_string();
            bench::doors::DoorsBench {
                kind,
                seal: seal_proof(&seal)?,
                jobs,
                concurrency,
                rounds,
                backend,
                work_dir,
                json,
            }
            .run()
        }
        #[cfg(feature = "filecoin")]
        BenchCommand::Sizes { seal, json } => {
            bench::sizes::SizesBench { seal: seal_proof(&seal)?, json }.run()
        }
        #[cfg(feature = "filecoin")]
        BenchCommand::PorepShape {
            proof,
            runs,
            work_dir,
            keep_store,
            skip_whole_witness,
            prove_runs,
            in_flight,
            sectors,
            permits,
            device_memory,
            gpu_in_flight,
            json,
            common,
        } => {
            anyhow::ensure!(
                runs > 0 && in_flight > 0 && !permits.is_empty() && permits.iter().all(|&p| p > 0),
                "--runs, --in-flight and --permits must be at least 1"
            );
            // Before the backend opens: nothing of this run may use more.
            let ballast =
                device_memory.map(|m| bench::ballast::Beside::start(m, &common.data_dir)).transpose()?;
            let device_cap = ballast.as_ref().map(|b| b.held.clone());
            if let Some(held) = &device_cap {
                println!("{held}");
            }
            // The stream is the service's: its GPU workers too.
            let options = CudaOptions { partitions_in_flight: gpu_in_flight, ..common.cuda_options() };
            let backends = provd::backend::select(common.backend, &common.data_dir, &options)?.backends;
            let proof = seal_proof(&proof)?;
            bench::porep_shape::PorepShapeBench {
                proof,
                runs,
                work_dir,
                keep_store,
                whole_witness: !skip_whole_witness,
                prove_runs,
                in_flight,
                sectors,
                permits,
                device_cap,
                json,
            }
            .run(backends)
        }
        BenchCommand::Msm { sizes, cpu_sizes, runs, warmup, json, g2, scalars, keep_freed, data_dir } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            bench::msm::MsmBench { sizes, cpu_sizes, runs, warmup, json, g2, scalars, keep_freed }
                .run(gpu(&data_dir, "MSM")?)
        }
        BenchCommand::Link { bytes, runs, json, data_dir } => {
            anyhow::ensure!(runs > 0 && bytes > 0, "--runs and --bytes must be at least 1");
            bench::link::LinkBench { bytes: usize::try_from(bytes)?, runs, json }
                .run(&*gpu(&data_dir, "link")?)
        }
        BenchCommand::Ballast { device_memory, data_dir } => {
            bench::ballast::hold(&*gpu(&data_dir, "ballast")?, device_memory)
        }
        BenchCommand::Ntt { sizes, runs, warmup, json, data_dir } => {
            anyhow::ensure!(runs > 0, "--runs must be at least 1");
            bench::ntt::NttBench { sizes, runs, warmup, json }.run(gpu(&data_dir, "NTT")?)
        }
    }
}

/// A size in bytes: a number, or with a unit ("16GiB").
fn byte_size(s: &str) -> Result<u64, String> {
    match s.parse::<provd::pipeline::MemoryBudget>()? {
        provd::pipeline::MemoryBudget::Bytes(b) => Ok(b),
        _ => Err(format!("'{s}' is not a size (try \"16GiB\")")),
    }
}

/// A registered seal proof named on the command line.
#[cfg(feature = "filecoin")]
fn seal_proof(name: &str) -> anyhow::Result<filecoin_proofs_api::RegisteredSealProof> {
    serde_json::from_value(serde_json::Value::String(name.into()))
        .map_err(|_| anyhow::anyhow!("--proof {name}: not a registered seal proof (e.g. StackedDrg2KiBV1_1)"))
}

/// `provd bench lane --critical`: a built-in circuit, or a Filecoin kind
/// proved from vanilla proofs at 2 KiB.
fn lane_urgent(
    name: &str,
    data_dir: &std::path::Path,
    work_dir: PathBuf,
) -> anyhow::Result<bench::lane::Urgent> {
    #[cfg(feature = "filecoin")]
    if let Ok(kind) = name.parse::<bench::vanilla::VanillaKind>() {
        let seal = filecoin_proofs_api::RegisteredSealProof::StackedDrg2KiBV1_1;
        let json = PathBuf::new();
        return bench::vanilla::VanillaBench { kind, seal, runs: 1, work_dir, json }.urgent();
    }
    let circuit: Builtin = name.parse().map_err(|e| anyhow::anyhow!("--critical {name}: {e}"))?;
    let key = std::sync::Arc::new(key_cache::load_or_generate(data_dir, circuit)?);
    bench::lane::Urgent::bench(circuit, key)
}
