//! The service: the pipeline engine, the circuits it serves, and the
//! snapshots of its state that /v1/status, /v1/events and the dashboard show.
//! The HTTP layer (`http`) and `provd demo` sit on top of it.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use blstrs::Scalar;
use ff::PrimeField;
use serde::Serialize;

use crate::backend::BackendChoice;
use crate::circuits::Builtin;
use crate::config::Config;
use crate::groth16::{synthesize, ProvingKey};
use crate::metrics::Metrics;
use crate::pipeline::buffers::ClassCounts;
use crate::pipeline::{Engine, JobId, JobSpec, JobStatus, Outcome, SubmitError, SynthesisFn};

/// A circuit the service proves, with its key resident.
pub struct LoadedCircuit {
    pub circuit: Builtin,
    pub key: Arc<ProvingKey>,
}

/// One partition as a client describes it.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionRequest {
    /// The bench witness's seed.
    pub seed: u64,
    /// The public inputs the client expects ("0x…" big-endian hex); when
    /// given, a proof is made only if the witness produces exactly these.
    #[serde(default)]
    pub public_inputs: Option<Vec<String>>,
}

/// Why a request was refused before a job existed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("unknown circuit '{name}'; this worker serves: {available}")]
    UnknownCircuit { name: String, available: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{queued} partitions are already waiting (limit {limit}); retry later")]
    QueueFull { queued: usize, limit: usize },
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// What the live view and /v1/status show at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// Milliseconds since the Unix epoch.
    pub t: u64,
    /// Admitted partitions per stage (synthesis, gpu_queue, prove_start, prove_finish).
    pub stages: BTreeMap<&'static str, i64>,
    pub buffers: ClassCounts,
    pub buffer_bytes: ClassCounts,
    pub reserved_bytes: u64,
    pub budget_bytes: u64,
    pub rss_bytes: u64,
    pub gpu_queue_depth: i64,
    pub gpu_queue_capacity: i64,
    pub partitions_waiting: usize,
    pub partitions_completed: u64,
    pub partitions_failed: u64,
    pub jobs_succeeded: u64,
    pub jobs_failed: u64,
    pub jobs_cancelled: u64,
    pub gpus: Vec<GpuMemory>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuMemory {
    pub device: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// Snapshots kept for clients that connect later: ten minutes at one a second.
const HISTORY: usize = 600;

pub struct Service {
    pub engine: Engine,
    pub circuits: BTreeMap<String, LoadedCircuit>,
    pub config: Config,
    pub backends: Vec<String>,
    gpus: Vec<Arc<provd_kernels::Gpu>>,
    history: Mutex<VecDeque<Snapshot>>,
}

impl Service {
    /// Loads (or generates) every configured circuit's key and starts the engine.
    pub fn start(config: Config, data_dir: &Path, backend: BackendChoice) -> anyhow::Result<Arc<Self>> {
        let metrics = Arc::new(Metrics::new());
        let mut circuits = BTreeMap::new();
        for c in &config.circuits {
            let key = Arc::new(crate::params::load_or_generate(data_dir, c.name)?);
            metrics
                .srs_bytes
                .with_label_values(&[&c.name.to_string(), "host"])
                .set(key.resident_bytes() as i64);
            circuits.insert(c.name.to_string(), LoadedCircuit { circuit: c.name, key });
        }
        let (backend, gpu) = crate::backend::select_with_gpu(backend, data_dir)?;
        let backend: Arc<dyn crate::groth16::Backend> = backend.into();
        let backends = vec![backend.name().to_string()];
        let engine = Engine::start(config.pipeline.clone(), vec![backend], metrics)?;
        Ok(Arc::new(Self {
            engine,
            circuits,
            config,
            backends,
            gpus: gpu.into_iter().collect(),
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
        }))
    }

    /// Validates a request and submits its job.
    pub fn submit(&self, circuit: &str, partitions: Vec<PartitionRequest>) -> Result<JobId, RequestError> {
        let loaded = self.circuits.get(circuit).ok_or_else(|| RequestError::UnknownCircuit {
            name: circuit.to_string(),
            available: self.circuits.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
        let limit = self.config.server.max_queued_partitions;
        if partitions.is_empty() {
            return Err(RequestError::Invalid(
                "\"partitions\" is empty: a job needs at least one witness".into(),
            ));
        }
        if partitions.len() > limit {
            return Err(RequestError::Invalid(format!(
                "{} partitions in one job; at most {limit} (server.max_queued_partitions)",
                partitions.len()
            )));
        }
        let queued = self.engine.queued_partitions();
        if queued + partitions.len() > limit {
            return Err(RequestError::QueueFull { queued, limit });
        }
        let expected = loaded.key.vk.num_public_inputs();
        let mut work: Vec<SynthesisFn> = Vec::with_capacity(partitions.len());
        for (i, p) in partitions.into_iter().enumerate() {
            let mut c = loaded.circuit.circuit(Some(p.seed));
            if let Some(inputs) = p.public_inputs {
                if inputs.len() != expected {
                    return Err(RequestError::Invalid(format!(
                        "partition {i}: {} public inputs given, {circuit} has {expected}",
                        inputs.len()
                    )));
                }
                let parsed = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, s)| {
                        parse_scalar(s).map_err(|e| format!("partition {i}: public_inputs[{k}]: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(RequestError::Invalid)?;
                c = c.claiming(parsed);
            }
            work.push(Box::new(move || synthesize(c)));
        }
        Ok(self.engine.submit(JobSpec {
            circuit: circuit.to_string(),
            key: loaded.key.clone(),
            partitions: work,
        })?)
    }

    /// Device memory per GPU now; also sets the GPU memory gauges, which
    /// nothing else updates (a scrape of /metrics calls this).
    pub fn gpu_memory(&self) -> Vec<GpuMemory> {
        let m = self.engine.metrics();
        self.gpus
            .iter()
            .filter_map(|g| {
                let (free, total) = g.memory().ok()?;
                let used = total.saturating_sub(free) as u64;
                m.gpu_memory_used_bytes.with_label_values(&[&g.info().name]).set(used as i64);
                m.gpu_memory_total_bytes.with_label_values(&[&g.info().name]).set(total as i64);
                Some(GpuMemory {
                    device: format!("{} ({})", g.info().name, g.info().ordinal),
                    used_bytes: used,
                    total_bytes: total as u64,
                })
            })
            .collect()
    }

    /// The state of everything now.
    pub fn snapshot(&self) -> Snapshot {
        let m = self.engine.metrics();
        let ledger = self.engine.ledger();
        let count = |v: &prometheus::IntCounterVec, o: Outcome| v.with_label_values(&[o.name()]).get();
        Snapshot {
            t: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            stages: crate::pipeline::STAGES
                .iter()
                .map(|st| (st.name(), m.partitions_in_stage.with_label_values(&[st.name()]).get()))
                .collect(),
            buffers: ledger.counts(),
            buffer_bytes: ledger.bytes(),
            reserved_bytes: self.engine.budget().reserved(),
            budget_bytes: self.engine.budget().total(),
            rss_bytes: crate::metrics::rss_bytes(),
            gpu_queue_depth: m.gpu_queue_depth.get(),
            gpu_queue_capacity: m.gpu_queue_capacity.get(),
            partitions_waiting: self.engine.queued_partitions(),
            partitions_completed: count(&m.partitions, Outcome::Succeeded),
            partitions_failed: count(&m.partitions, Outcome::Failed),
            jobs_succeeded: count(&m.jobs, Outcome::Succeeded),
            jobs_failed: count(&m.jobs, Outcome::Failed),
            jobs_cancelled: count(&m.jobs, Outcome::Cancelled),
            gpus: self.gpu_memory(),
        }
    }

    /// Takes a snapshot into the history (called once a tick) and returns it.
    pub fn tick(&self) -> Snapshot {
        let snap = self.snapshot();
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(snap.clone());
        drop(h);
        self.engine.forget_ended(Duration::from_secs(self.config.server.job_retention_seconds));
        snap
    }

    pub fn history(&self) -> Vec<Snapshot> {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    pub fn recent_jobs(&self, n: usize) -> Vec<JobStatus> {
        self.engine.recent_jobs(n)
    }
}

/// "0x…" big-endian hex (or decimal) → a field element below the modulus.
pub fn parse_scalar(s: &str) -> Result<Scalar, String> {
    let s = s.trim();
    let value = if let Some(hex) = s.strip_prefix("0x") {
        if hex.is_empty() || hex.len() > 64 {
            return Err(format!("'{s}' is not 1 to 64 hex digits after 0x"));
        }
        let padded = format!("{hex:0>64}");
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&padded, &mut bytes).map_err(|_| format!("'{s}' is not hexadecimal"))?;
        bytes.reverse();
        Option::from(Scalar::from_repr(bytes))
    } else {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("'{s}' is neither 0x-hex nor a decimal number"));
        }
        Scalar::from_str_vartime(s)
    };
    value.ok_or_else(|| format!("'{s}' is not below the BLS12-381 scalar field modulus"))
}

/// A field element as "0x…" big-endian hex.
pub fn format_scalar(x: &Scalar) -> String {
    let mut bytes = x.to_repr();
    bytes.as_mut().reverse();
    format!("0x{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;

    #[test]
    fn scalars_round_trip_through_hex_and_parse_decimal() {
        let x = Scalar::random(&mut rand::rngs::OsRng);
        assert_eq!(parse_scalar(&format_scalar(&x)).unwrap(), x);
        assert_eq!(parse_scalar("0x2a").unwrap(), Scalar::from(42));
        assert_eq!(parse_scalar("42").unwrap(), Scalar::from(42));
        for bad in [
            "",
            "0x",
            "0xzz",
            "-1",
            "1.5",
            &format!("0x{}", "f".repeat(64)),
            &format!("0x{}", "1".repeat(65)),
        ] {
            assert!(parse_scalar(bad).is_err(), "{bad}");
        }
    }
}
