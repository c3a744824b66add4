//! Request and response bodies as serde types: what goes over the wire, and
//! nothing else.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::strict_json::StrictValue;
use crate::circuits::KeySource;
use crate::pipeline::{Door, JobStatus, Priority, Stage, StageTimes};
use crate::service::{BackendInfo, JobInput, Service, Snapshot};

/// `POST /v1/prove`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProveRequest {
    pub circuit: String,
    /// One witness per partition, in the circuit kind's shape
    /// (`{"seed": N}` for bench circuits).
    #[serde(default)]
    pub partitions: Option<Vec<StrictValue>>,
    /// The job's input, for kinds that split it into partitions themselves
    /// (`filecoin-porep`: one sector's C1 output and ids).
    #[serde(default)]
    pub input: Option<StrictValue>,
    /// `low`, `normal`, `high` or `critical`; the circuit's default when absent.
    #[serde(default)]
    pub priority: Option<Priority>,
}

impl ProveRequest {
    /// The job's witnesses: exactly one of `partitions` and `input`.
    pub fn job(self) -> Result<JobInput, &'static str> {
        match (self.partitions, self.input) {
            (Some(p), None) => Ok(JobInput::Partitions(p.into_iter().map(|w| w.0).collect())),
            (None, Some(i)) => Ok(JobInput::Input(i.0)),
            _ => Err(
                "a job has either \"partitions\" (one witness each) or an \"input\" that its circuit splits",
            ),
        }
    }
}

/// The query of `POST /v1/prove`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProveQuery {
    /// Answer when the job has ended, with the job document.
    #[serde(default)]
    pub wait: bool,
    /// The circuit of a binary witness body (a JSON body names it inside).
    #[serde(default)]
    pub circuit: Option<String>,
    /// The priority of a binary witness body's job (a JSON body gives it inside).
    #[serde(default)]
    pub priority: Option<Priority>,
}

/// The query of `GET /v1/circuits/{name}/verifying-key`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VkQuery {
    /// One of the circuit's `verifying_key_encodings`; the first by default.
    pub encoding: Option<String>,
}

/// 202 to `POST /v1/prove`.
#[derive(Debug, Serialize)]
pub struct Accepted {
    pub job_id: String,
    pub status_url: String,
}

/// A job's state as `/v1/jobs/{id}` shows it.
#[derive(Debug, Serialize)]
pub struct JobView {
    pub id: String,
    pub circuit: String,
    pub priority: Priority,
    /// The front door it came through: http, grpc or in-process.
    pub door: Door,
    /// queued, running, succeeded, failed or cancelled.
    pub state: &'static str,
    pub error: Option<String>,
    pub elapsed_seconds: f64,
    /// The job's own result once it has succeeded, for kinds that make one
    /// (`filecoin-porep`: the sector's proof); absent from job summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Map<String, Value>>,
    pub partitions: Vec<PartitionView>,
}

#[derive(Debug, Serialize)]
pub struct PartitionView {
    pub stage: Stage,
    /// The backend that took it to prove ("cuda:0", "cpu"), once one has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub seconds: StageTimes,
    pub error: Option<String>,
    /// Device faults met on earlier tries (the partition was tried again).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
    /// The proof in the circuit kind's encoding (`proof`, `public_inputs`
    /// for bench circuits), once done; absent from job summaries.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Map<String, Value>>,
}

impl JobView {
    /// The job document; with `results`, each finished partition's proof.
    pub fn new(s: &JobStatus, service: &Service, results: bool) -> Self {
        let state = s.state();
        let kind = service.circuit(&s.circuit);
        let partitions = s
            .partitions
            .iter()
            .map(|p| {
                let result = results.then(|| match (&p.proof, kind) {
                    (Some(proof), Some(kind)) => kind.proof_json(proof, &p.public_inputs),
                    _ => serde_json::Map::from_iter([
                        ("proof".to_string(), Value::Null),
                        ("public_inputs".to_string(), Value::Null),
                    ]),
                });
                PartitionView {
                    stage: p.stage,
                    device: p.device.clone(),
                    seconds: p.times.clone(),
                    error: p.error.clone(),
                    faults: p.faults.clone(),
                    result,
                }
            })
            .collect();
        let proofs: Option<Vec<_>> = s.partitions.iter().map(|p| p.proof.as_ref()).collect();
        let result = match (results, s.outcome, kind, proofs) {
            (true, Some(crate::pipeline::Outcome::Succeeded), Some(kind), Some(proofs)) => {
                kind.job_result(&proofs)
            }
            _ => None,
        };
        JobView {
            id: s.id.to_string(),
            result,
            circuit: s.circuit.clone(),
            priority: s.priority,
            door: s.door,
            state,
            error: s.error.clone(),
            elapsed_seconds: s.elapsed_seconds,
            partitions,
        }
    }
}

/// `GET /v1/circuits`.
#[derive(Debug, Serialize)]
pub struct CircuitsView {
    pub circuits: Vec<CircuitView>,
}

#[derive(Debug, Serialize)]
pub struct CircuitView {
    pub name: String,
    pub kind: &'static str,
    /// Its jobs' priority when a request does not give one.
    pub priority: Priority,
    pub constraints: usize,
    pub domain_size: usize,
    pub public_inputs: usize,
    /// The QAP reduction its key was made for.
    pub reduction: &'static str,
    pub key: KeySource,
    /// Host bytes of the proving key (counted in the memory budget).
    pub srs_bytes: usize,
    /// Bytes of its bases on the GPU now (0 when not resident or on the CPU).
    pub srs_device_bytes: u64,
    /// The GPUs that stream its bases from the host's memory (page-locked)
    /// rather than hold them: where the key is larger than the card.
    pub srs_streamed_on: Vec<String>,
    pub partition_estimate_bytes: u64,
    pub verifying_key_encodings: Vec<&'static str>,
    pub verifying_key_url: String,
}

impl CircuitsView {
    pub fn new(service: &Service) -> Self {
        let circuits = service
            .served()
            .map(|(name, served)| (name, served.priority, &served.kind))
            .map(|(name, priority, c)| CircuitView {
                name: name.to_string(),
                kind: c.kind(),
                priority,
                constraints: c.constraints(),
                domain_size: c.key().domain_size(),
                public_inputs: c.public_inputs(),
                reduction: c.key().reduction.name(),
                key: c.key_source().clone(),
                srs_bytes: c.key().resident_bytes(),
                srs_device_bytes: service.key_device_bytes(name),
                srs_streamed_on: service.key_streamed_on(name),
                partition_estimate_bytes: service.partition_estimate_bytes(name),
                verifying_key_encodings: c.verifying_key_encodings().iter().map(|e| e.name()).collect(),
                verifying_key_url: format!("/v1/circuits/{name}/verifying-key"),
            })
            .collect();
        CircuitsView { circuits }
    }
}

/// `GET /v1/status`.
#[derive(Debug, Serialize)]
pub struct StatusView {
    pub snapshot: Snapshot,
    pub backends: Vec<BackendInfo>,
    pub draining: bool,
    pub config: StatusConfig,
}

#[derive(Debug, Serialize)]
pub struct StatusConfig {
    pub partition_permits: usize,
    pub critical_permits: usize,
    pub gpu_queue_capacity: usize,
    pub priority_aging_secs: u64,
    pub verify_proofs: bool,
}

/// `GET /healthz`.
#[derive(Debug, Serialize)]
pub struct Health {
    pub ok: bool,
}

/// `GET /readyz` when ready.
#[derive(Debug, Serialize)]
pub struct Ready {
    pub ready: bool,
    pub queued_partitions: usize,
}

/// Every error body.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub status: u16,
}
