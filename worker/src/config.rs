//! The service's configuration file (provd.toml): server settings, the
//! circuits to load, and the pipeline's knobs. Every field has a default;
//! `provd.example.toml` lists them all.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::circuits::CircuitConfig;
use crate::circuits::{BenchConfig, Builtin};
use crate::pipeline::{MemoryBudget, PipelineConfig};

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub circuits: Vec<CircuitConfig>,
    pub pipeline: PipelineConfig,
    pub gpu: GpuConfig,
    pub jobs: JobsConfig,
    /// Fleet mode's settings (used with `jobs.store` = a PostgreSQL URL).
    pub fleet: crate::fleet::FleetConfig,
    /// The cuzk.v1 gRPC front door (Curio's proving protocol).
    pub grpc: GrpcConfig,
}

/// The `[grpc]` table: where the cuzk.v1 gRPC door listens.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Addresses as Curio's `[Cuzk] Address` names them: `host:port`, or
    /// `unix:///path/to.sock`; none (the default): no gRPC door.
    pub listen: Vec<GrpcAddress>,
    /// Largest message either way, in bytes (Curio's client allows 256 MiB:
    /// a 32 GiB WindowPoSt partition's vanilla proofs are tens of MiB).
    pub max_message_bytes: usize,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self { listen: Vec::new(), max_message_bytes: 256 << 20 }
    }
}

/// Where the gRPC door listens.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum GrpcAddress {
    Tcp(SocketAddr),
    /// A unix socket: reachable only through the file system, so no token.
    Unix(PathBuf),
}

impl GrpcAddress {
    /// Whether a client must send the bearer token here (when one is set):
    /// off loopback over TCP.
    pub fn needs_token(&self) -> bool {
        matches!(self, GrpcAddress::Tcp(at) if !at.ip().is_loopback())
    }
}

impl std::str::FromStr for GrpcAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix://").or_else(|| s.strip_prefix("unix:")) {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err(format!(
                    "'{s}': a unix socket's path must be absolute (unix:///run/provd/cuzk.sock)"
                ));
            }
            return Ok(GrpcAddress::Unix(path));
        }
        s.parse().map(GrpcAddress::Tcp).map_err(|_| {
            format!("'{s}' is no gRPC address: give host:port (127.0.0.1:9820) or unix:///path/to.sock")
        })
    }
}

impl TryFrom<String> for GrpcAddress {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for GrpcAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrpcAddress::Tcp(at) => write!(f, "{at}"),
            GrpcAddress::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default(),
            circuits: vec![CircuitConfig::builtin("bench-14".parse().expect("a built-in circuit"))],
            pipeline: PipelineConfig::default(),
            gpu: GpuConfig::default(),
            jobs: JobsConfig::default(),
            fleet: crate::fleet::FleetConfig::default(),
            grpc: GrpcConfig::default(),
        }
    }
}

/// The `[jobs]` table: where accepted jobs are kept.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    pub store: JobStoreKind,
    /// The SQLite journal's file; unset: `jobs.sqlite3` in the data directory.
    pub path: Option<PathBuf>,
    /// What a restart does with jobs that were accepted and had not ended.
    pub on_restart: OnRestart,
}

/// Where jobs are kept: `"sqlite"`, `"memory"`, or a PostgreSQL URL
/// (`"postgres://user@host/db"`) for fleet mode; `"postgres"` alone takes the
/// URL from `PROVD_DATABASE_URL` (so that a password can come from a secret
/// rather than the config file).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum JobStoreKind {
    /// A journal in an SQLite file: written before a job is acknowledged, so
    /// a crash or restart loses no accepted job; finished proofs are served
    /// after a restart for the retention time.
    #[default]
    Sqlite,
    /// In this process's memory only: lost on a restart.
    Memory,
    /// The fleet's queue in PostgreSQL, shared by every worker (`[fleet]`).
    Postgres(PostgresUrl),
}

/// A PostgreSQL connection URL; shown without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(pub String);

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // postgres://user:secret@host/db → postgres://user:…@host/db
        let shown = match (self.0.find("://"), self.0.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let user = &self.0[scheme + 3..at];
                match user.split_once(':') {
                    Some((name, _)) => format!("{}{name}:…{}", &self.0[..scheme + 3], &self.0[at..]),
                    None => self.0.clone(),
                }
            }
            _ => self.0.clone(),
        };
        f.write_str(&shown)
    }
}

impl TryFrom<String> for JobStoreKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "sqlite" => Ok(JobStoreKind::Sqlite),
            "memory" => Ok(JobStoreKind::Memory),
            "postgres" | "postgresql" => match std::env::var("PROVD_DATABASE_URL") {
                Ok(url) if !url.trim().is_empty() => Ok(JobStoreKind::Postgres(PostgresUrl(url.trim().to_string()))),
                _ => Err("jobs.store = \"postgres\" takes its URL from PROVD_DATABASE_URL, which is unset or blank".into()),
            },
            url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(JobStoreKind::Postgres(PostgresUrl(url.to_string())))
            }
            other => Err(format!(
                "jobs.store '{other}': expected \"sqlite\", \"memory\", \"postgres\" or a postgres:// URL"
            )),
        }
    }
}

/// What a restart does with unfinished jobs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnRestart {
    /// Run them again from their witnesses (every partition).
    #[default]
    Rerun,
    /// End them as failed, saying why.
    Fail,
}

impl CircuitConfig {
    /// A built-in circuit under its own name, with a generated TEST-ONLY key.
    pub fn builtin(circuit: Builtin) -> Self {
        CircuitConfig::Bench(BenchConfig {
            name: circuit.to_string(),
            log_size: None,
            shape: None,
            params: None,
            priority: None,
        })
    }
}

/// The `[gpu]` table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GpuConfig {
    /// Device bytes the resident keys' bases may take together ("24GiB");
    /// unset: whatever the device has free. Beyond it, the least recently
    /// used key is evicted.
    pub key_memory_limit: Option<MemoryBudget>,
    /// Where B's G2 MSM runs on a CUDA backend: "gpu" (its bases resident
    /// beside the G1 ones) or "cpu".
    pub b_g2_msm: crate::backend::G2Placement,
    /// The CUDA devices to prove on: "all" (the default) or a list of
    /// ordinals, `[0, 2]`; one GPU worker and one copy of each resident key
    /// per device.
    #[serde(deserialize_with = "device_set")]
    pub devices: crate::backend::DeviceSet,
    /// Partitions in prove_start on each GPU at once, 1 or 2: with 2, one
    /// partition's copies to the device overlap the other's kernels, at the
    /// cost of those copies in device memory while it waits for the device.
    pub partitions_in_flight: crate::backend::InFlight,
    /// How a key's large G1 queries sit on the device: "shifted" (with
    /// precomputed shifted copies, 11 to 15 times the bytes from 2^20 points
    /// up, when they fit beside the resident keys; plain otherwise) or
    /// "plain".
    pub bases: crate::backend::BasesLayout,
    /// Where a, b and c of circuits with recorded matrices (bench, Filecoin)
    /// are computed: "gpu" (from the matrices resident beside the key, when
    /// they fit; the host then computes only the assignment) or "cpu".
    pub products: crate::backend::ProductsPlacement,
}

fn device_set<'de, D: serde::Deserializer<'de>>(d: D) -> Result<crate::backend::DeviceSet, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Word(String),
        List(Vec<usize>),
    }
    match Raw::deserialize(d)? {
        Raw::Word(w) if w == "all" => Ok(crate::backend::DeviceSet::All),
        Raw::Word(w) => Err(serde::de::Error::custom(format!(
            "gpu.devices is \"all\" or a list of ordinals, not \"{w}\""
        ))),
        Raw::List(l) => Ok(crate::backend::DeviceSet::List(l)),
    }
}

impl GpuConfig {
    /// The backend's options; a percentage is refused (sizes only).
    pub fn cuda_options(&self) -> anyhow::Result<crate::backend::CudaOptions> {
        let key_memory_limit = match self.key_memory_limit {
            None => None,
            Some(MemoryBudget::Bytes(b)) => Some(b),
            Some(MemoryBudget::Fraction(_)) => {
                anyhow::bail!("gpu.key_memory_limit takes a size such as \"24GiB\", not a percentage")
            }
        };
        Ok(crate::backend::CudaOptions {
            key_memory_limit,
            b_g2_msm: self.b_g2_msm,
            devices: self.devices.clone(),
            partitions_in_flight: self.partitions_in_flight,
            bases: self.bases,
            products: self.products,
        })
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (loopback by default: expose it on purpose).
    pub listen: SocketAddr,
    /// A second address serving `/metrics` (and `/healthz`) alone, without
    /// the token: what Prometheus scrapes, so that it never holds the API's
    /// token. Unset: metrics are served on `listen` only (behind the token).
    pub metrics_listen: Option<SocketAddr>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Partitions of each priority class accepted but not yet admitted,
    /// beyond which new jobs of that class get 429 (each class has its own
    /// bound, so that sealing never fills a WinningPoSt's queue); also the
    /// partitions of one job at most.
    pub max_queued_partitions: usize,
    /// A file holding the bearer token clients must send; unset: no auth
    /// (the environment variable PROVD_AUTH_TOKEN also sets one).
    pub auth_token_file: Option<PathBuf>,
    /// Serve off loopback without a token (refused unless set).
    pub allow_unauthenticated: bool,
    /// Seconds that shutdown waits for accepted jobs before failing them.
    pub shutdown_grace_seconds: u64,
    /// Seconds a finished job's result stays available.
    pub job_retention_seconds: u64,
    /// Seconds a client has to send a request's headers (and a kept-alive
    /// connection may sit idle); a slower one is disconnected.
    pub header_read_timeout_seconds: u64,
    /// Seconds a request body may go without sending a byte; a body that
    /// stalls longer is refused with 408 (its size is bounded apart, by
    /// `max_body_bytes` or the circuit's witness size).
    pub body_read_timeout_seconds: u64,
    /// Seconds a write to a client may make no progress (the client reads
    /// nothing) before its connection is closed.
    pub write_timeout_seconds: u64,
    /// Connections open at once; beyond it, a connection waiting on its
    /// client gives way to a new one, or the new one is closed.
    pub max_connections: usize,
    /// `/v1/events` streams open at once; more get 503.
    pub max_event_streams: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().unwrap(),
            metrics_listen: None,
            max_body_bytes: 1 << 20,
            max_queued_partitions: 256,
            auth_token_file: None,
            allow_unauthenticated: false,
            shutdown_grace_seconds: 60,
            job_retention_seconds: 3600,
            header_read_timeout_seconds: 10,
            body_read_timeout_seconds: 30,
            write_timeout_seconds: 30,
            max_connections: 1024,
            max_event_streams: 64,
        }
    }
}

impl Config {
    /// Reads a config file; errors name the file and the problem.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let config: Config = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        config.pipeline.validate().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        anyhow::ensure!(!config.circuits.is_empty(), "{}: no [[circuits]] to serve", path.display());
        let mut names = std::collections::BTreeSet::new();
        for c in &config.circuits {
            anyhow::ensure!(
                names.insert(c.name()),
                "{}: two [[circuits]] are named '{}'",
                path.display(),
                c.name()
            );
        }
        config.gpu.cuda_options().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        config.fleet.validate().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// The bearer token, from `auth_token_file` or PROVD_AUTH_TOKEN.
    pub fn auth_token(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.server.auth_token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read auth_token_file {}: {e}", path.display()))?;
            let token = token.trim().to_string();
            anyhow::ensure!(!token.is_empty(), "auth_token_file {} is empty", path.display());
            return Ok(Some(token));
        }
        match std::env::var("PROVD_AUTH_TOKEN") {
            Ok(t) if t.trim().is_empty() => {
                anyhow::bail!("PROVD_AUTH_TOKEN is set but blank; unset it for no token, or give one")
            }
            Ok(t) => Ok(Some(t.trim().to_string())),
            Err(_) => Ok(None),
        }
    }

    /// The token, after refusing a listen address off loopback without one
    /// (unless `server.allow_unauthenticated` says so, which is logged).
    /// The same holds for the gRPC door's TCP addresses (a unix socket is
    /// guarded by its file's permissions).
    pub fn checked_auth_token(&self) -> anyhow::Result<Option<String>> {
        let token = self.auth_token()?;
        let http = (!self.server.listen.ip().is_loopback()).then(|| self.server.listen.to_string());
        let grpc = self.grpc.listen.iter().filter(|a| a.needs_token()).map(|a| format!("{a} (gRPC)"));
        for listen in http.into_iter().chain(grpc) {
            if token.is_some() {
                break;
            }
            anyhow::ensure!(
                self.server.allow_unauthenticated,
                "listening on {listen} (off loopback) with no bearer token: set server.auth_token_file or \
                 PROVD_AUTH_TOKEN, or server.allow_unauthenticated = true to serve the API to anyone who can reach it"
            );
            tracing::warn!(%listen, "serving off loopback WITHOUT authentication (server.allow_unauthenticated)");
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_is_the_defaults() {
        let config: Config =
            toml::from_str(include_str!("../../provd.example.toml")).expect("example parses");
        assert_eq!(config, Config::default());
    }

    #[test]
    fn the_job_store_is_sqlite_memory_or_a_postgres_url() {
        let store = |v: &str| toml::from_str::<JobsConfig>(&format!("store = {v:?}")).map(|c| c.store);
        assert_eq!(store("memory").unwrap(), JobStoreKind::Memory);
        let url = "postgres://provd:hunter2@db.internal:5432/provd";
        assert_eq!(store(url).unwrap(), JobStoreKind::Postgres(PostgresUrl(url.into())));
        let err = store("mysql://x").unwrap_err().to_string();
        assert!(err.contains("postgres:// URL"), "{err}");
        // The password never shows in logs or errors.
        let shown = format!("{:?}", PostgresUrl(url.into()));
        assert_eq!(shown, "postgres://provd:…@db.internal:5432/provd");
        assert!(!format!("{:?}", PostgresUrl("postgresql://db/provd".into())).contains('…'));
    }

    #[test]
    fn fleet_settings_are_checked() {
        let fleet = |t: &str| toml::from_str::<crate::fleet::FleetConfig>(t).unwrap().validate();
        assert!(fleet("").is_ok());
        assert!(fleet("lease_seconds = 1").unwrap_err().contains("lease_seconds"));
        assert!(fleet("lease_seconds = 6\nheartbeat_seconds = 6").unwrap_err().contains("shorter"));
        assert!(fleet("max_attempts = 0").unwrap_err().contains("max_attempts"));
        assert!(fleet("worker_id = \" \"").unwrap_err().contains("blank"));
    }

    #[test]
    fn off_loopback_without_a_token_is_refused_unless_allowed() {
        let mut c = Config::default();
        c.server.listen = "0.0.0.0:8080".parse().unwrap();
        if std::env::var_os("PROVD_AUTH_TOKEN").is_none() {
            let e = c.checked_auth_token().unwrap_err().to_string();
            assert!(e.contains("off loopback") && e.contains("allow_unauthenticated"), "{e}");
            c.server.allow_unauthenticated = true;
            assert_eq!(c.checked_auth_token().unwrap(), None);
        }
        let dir = tempfile::tempdir().unwrap();
        let blank = dir.path().join("token");
        std::fs::write(&blank, " \n").unwrap();
        c.server.auth_token_file = Some(blank);
        assert!(c.checked_auth_token().unwrap_err().to_string().contains("is empty"));
    }

    #[test]
    fn bad_files_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("provd.toml");
        std::fs::write(&p, "[server]\nlisten = \"nowhere\"\n").unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.contains("provd.toml") && e.contains("listen"), "{e}");
        std::fs::write(&p, "[[circuits]]\nkind = \"bench\"\nname = \"sha9\"\nfoo = 1\n").unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.contains("unknown field `foo`"), "{e}");
        std::fs::write(
            &p,
            "[[circuits]]\nkind = \"bench\"\nname = \"a\"\n[[circuits]]\nkind = \"bench\"\nname = \"a\"\n",
        )
        .unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.contains("two [[circuits]] are named 'a'"), "{e}");
        std::fs::write(&p, "[gpu]\nkey_memory_limit = \"50%\"\n").unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.contains("not a percentage"), "{e}");
        let in_flight = |v: &str| toml::from_str::<GpuConfig>(&format!("partitions_in_flight = {v}"));
        assert_eq!(in_flight("2").unwrap().partitions_in_flight, crate::backend::InFlight::Two);
        for bad in ["0", "3", "\"2\""] {
            assert!(in_flight(bad).is_err(), "partitions_in_flight = {bad}");
        }
        assert!(in_flight("3").unwrap_err().to_string().contains("1 or 2"));
        let bases = |v: &str| toml::from_str::<GpuConfig>(&format!("bases = {v}"));
        assert_eq!(GpuConfig::default().bases, crate::backend::BasesLayout::Shifted);
        assert_eq!(
            bases("\"plain\"").unwrap().cuda_options().unwrap().bases,
            crate::backend::BasesLayout::Plain
        );
        assert!(bases("\"fast\"").unwrap_err().to_string().contains("shifted"), "names the choices");
        let products = |v: &str| toml::from_str::<GpuConfig>(&format!("products = {v}"));
        assert_eq!(GpuConfig::default().products, crate::backend::ProductsPlacement::Gpu);
        assert_eq!(
            products("\"cpu\"").unwrap().cuda_options().unwrap().products,
            crate::backend::ProductsPlacement::Cpu
        );
        assert!(products("\"host\"").unwrap_err().to_string().contains("gpu"), "names the choices");
        assert!(Config::load(&dir.path().join("missing.toml"))
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}
