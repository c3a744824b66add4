//! The intake every front door shares: a request (a circuit's name and its
//! witnesses, as they arrived) becomes a job the engine can run. It checks
//! the circuit and the job's size, computes the idempotency digest, holds
//! the witnesses' memory against the budget and decodes them by the
//! circuit's kind. Where the job goes next (this worker's engine and
//! journal, or the fleet's queue) is the [`Jobs`](super::Jobs) in use.

use std::sync::Arc;

use super::circuits::{Circuits, Served, UnknownCircuit};
use crate::circuits::{CircuitKind, WitnessError};
use crate::fleet::QueueError;
use crate::jobs::journal::{JournalError, StoredWitness};
use crate::pipeline::memory::HeldWitness;
use crate::pipeline::{Door, Engine, JobId, JobSpec, Priority, SubmitError, SynthesisFn, WitnessDoesNotFit};

/// Why a request was refused before a job existed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    UnknownCircuit(#[from] UnknownCircuit),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Witness(#[from] WitnessError),
    #[error(
        "{queued} {} partitions are already waiting (limit {limit} for each class); retry later",
        priority.name()
    )]
    QueueFull { priority: Priority, queued: usize, limit: usize },
    /// The engine refused the job.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// Received witnesses that the memory budget cannot hold (now, or ever).
    #[error(transparent)]
    DoesNotFit(#[from] WitnessDoesNotFit),
    /// A body the circuit's kind does not take.
    #[error("{0}")]
    UnsupportedBody(String),
    /// A witness larger than the job store can ever hold.
    #[error("{0}")]
    TooLarge(String),
    #[error(
        "idempotency key '{key}' was used for another request (job {job}); use a new key for a new request"
    )]
    KeyReused { key: String, job: JobId },
    /// The journal could not record the job, so it was not accepted.
    #[error("the job could not be recorded: {0}")]
    Journal(#[from] JournalError),
    /// The fleet's queue could not take the job.
    #[error("the fleet's queue: {0}")]
    Queue(#[source] QueueError),
}

/// What a refusal means to a client, whichever door it came through: each
/// front door maps these onto its own protocol's codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request is wrong; sending it again will not help.
    BadInput,
    /// The request (or a witness) is larger than this worker can ever take.
    TooLarge,
    /// A body of a type the circuit's kind does not take.
    UnsupportedBody,
    /// The idempotency key belongs to another request.
    Conflict,
    /// Full now (queue or memory budget): retry shortly.
    Busy,
    /// A store is unreachable or failing: retry later, here or elsewhere.
    Unavailable,
    /// The worker is draining: send the job to another worker.
    ShuttingDown,
}

impl RequestError {
    pub fn refusal(&self) -> Refusal {
        match self {
            RequestError::UnknownCircuit(_)
            | RequestError::Invalid(_)
            | RequestError::Witness(_)
            | RequestError::Submit(
                SubmitError::Empty
                | SubmitError::NeverFits { .. }
                | SubmitError::NeverFitsBesideHeadroom { .. },
            ) => Refusal::BadInput,
            RequestError::DoesNotFit(WitnessDoesNotFit::Never { .. }) | RequestError::TooLarge(_) => {
                Refusal::TooLarge
            }
            RequestError::UnsupportedBody(_) => Refusal::UnsupportedBody,
            RequestError::KeyReused { .. } => Refusal::Conflict,
            RequestError::QueueFull { .. } | RequestError::DoesNotFit(WitnessDoesNotFit::NotNow { .. }) => {
                Refusal::Busy
            }
            RequestError::Journal(_) | RequestError::Queue(_) => Refusal::Unavailable,
            RequestError::Submit(SubmitError::ShuttingDown) => Refusal::ShuttingDown,
        }
    }
}

/// A JSON job's witnesses, as a request gives them.
pub enum JobInput {
    /// One witness per partition.
    Partitions(Vec<serde_json::Value>),
    /// One input that the circuit's kind splits into partitions
    /// ([`CircuitKind::split`]).
    Input(serde_json::Value),
}

/// A request's witnesses, as they arrived.
pub enum Witnesses {
    /// One JSON value per partition, decoded by the circuit's kind.
    Json(Vec<serde_json::Value>),
    /// One partition's witness as a binary body, held against the budget
    /// since before it was read ([`Intake::hold_binary_witness`]).
    Binary { bytes: Vec<u8>, held: HeldWitness },
}

impl Witnesses {
    pub fn count(&self) -> usize {
        match self {
            Witnesses::Json(v) => v.len(),
            Witnesses::Binary { .. } => 1,
        }
    }
}

/// A client's name for its request, and what a repeat under that name means.
/// The two doors differ because their clients do: an HTTP client picks a
/// fresh key per request, Curio names requests after what they prove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestKey {
    /// HTTP's `Idempotency-Key`: one request per key. The same request again
    /// is the same job; another request under the key is refused
    /// ([`RequestError::KeyReused`]).
    Idempotency(String),
    /// cuzk.v1's `request_id`: a label that several requests may share
    /// (Curio names every WindowPoSt partition of a deadline alike). The
    /// same request under it is the same job; another request is another
    /// job, never a refusal.
    Label(String),
}

/// A request's key as the job stores keep it, and the digest of the request.
#[derive(Clone, Debug)]
pub struct Idempotency {
    /// An `Idempotency-Key` as given; a label joined with the request's
    /// digest (so one label names one job per distinct request). The space
    /// in a label's form keeps it apart from every `Idempotency-Key`, which
    /// has visible characters only.
    pub key: String,
    pub digest: [u8; 32],
}

impl Idempotency {
    /// `key` for a request of `witnesses` to `circuit`: equal requests get
    /// equal digests.
    /// A priority the request gave counts; the circuit's default does not
    /// (so a retry is the same request whatever the config says now).
    pub fn of(key: RequestKey, circuit: &str, priority: Option<Priority>, witnesses: &Witnesses) -> Self {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(circuit.as_bytes());
        if let Some(p) = priority {
            h.update([2, p.rank() as u8]);
        }
        match witnesses {
            Witnesses::Json(partitions) => {
                h.update([0]);
                // serde_json's maps are sorted: equal requests give equal bytes
                h.update(serde_json::to_vec(partitions).expect("JSON values encode"));
            }
            Witnesses::Binary { bytes, .. } => {
                h.update([1]);
                h.update(bytes);
            }
        }
        let digest: [u8; 32] = h.finalize().into();
        let key = match key {
            RequestKey::Idempotency(key) => key,
            RequestKey::Label(label) => format!("label {} {label}", hex::encode(digest)),
        };
        Self { key, digest }
    }
}

/// What a submission did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// A new job.
    New(JobId),
    /// The job an earlier request with the same idempotency key created.
    Existing(JobId),
}

impl Submitted {
    pub fn id(self) -> JobId {
        match self {
            Submitted::New(id) | Submitted::Existing(id) => id,
        }
    }
}

/// A request's witnesses, decoded into a job for the engine.
pub struct Decoded {
    /// The job: one synthesis per partition, each holding its witness's
    /// share of the budget until the partition ends.
    pub spec: JobSpec,
    /// The witnesses as the request gave them, for a store to keep (empty
    /// unless asked for).
    pub stored: Vec<StoredWitness>,
    /// What decoding alone needed (a binary body beside its decoded values),
    /// held until the caller drops it, after a store has the body.
    pub decoding: Option<HeldWitness>,
}

/// Turns requests into jobs, for every front door and every [`Jobs`](super::Jobs).
pub struct Intake {
    pub circuits: Circuits,
    engine: Arc<Engine>,
    /// Partitions in one job at most (`server.max_queued_partitions`).
    max_partitions: usize,
    /// Whether every proof is verified before it leaves.
    verify_proofs: bool,
}

impl Intake {
    pub fn new(circuits: Circuits, engine: Arc<Engine>, max_partitions: usize, verify_proofs: bool) -> Self {
        Self { circuits, engine, max_partitions, verify_proofs }
    }

    /// The circuit a request names, and its witness count checked.
    pub fn admit(&self, circuit: &str, witnesses: &Witnesses) -> Result<&Served, RequestError> {
        let served = self.circuits.get(circuit)?;
        let (count, limit) = (witnesses.count(), self.max_partitions);
        if count == 0 {
            return Err(RequestError::Invalid(
                "\"partitions\" is empty: a job needs at least one witness".into(),
            ));
        }
        if count > limit {
            return Err(RequestError::Invalid(format!(
                "{count} partitions in one job; at most {limit} (server.max_queued_partitions)"
            )));
        }
        Ok(served)
    }

    /// A JSON job's partitions: as given, or its input split by the circuit's kind.
    pub fn partitions(&self, circuit: &str, job: JobInput) -> Result<Vec<serde_json::Value>, RequestError> {
        Ok(match job {
            JobInput::Partitions(p) => p,
            JobInput::Input(input) => self.circuits.get(circuit)?.kind.split(input)?,
        })
    }

    /// Holds the budget for one binary witness of `circuit` before its body
    /// is read (the body and its decoded values, until decoding ends; then
    /// the values alone): the body limit, and the hold.
    pub fn hold_binary_witness(&self, circuit: &str) -> Result<(u64, HeldWitness), RequestError> {
        let served = self.circuits.get(circuit)?;
        let bytes = served.kind.witness_bytes().ok_or_else(|| {
            RequestError::UnsupportedBody(format!(
                "{circuit} is a {} circuit, whose witnesses are JSON: send 'Content-Type: application/json'",
                served.kind.kind()
            ))
        })?;
        Ok((bytes, self.engine.hold_witness(2 * bytes, served.kind.key())?))
    }

    /// Decodes a request's witnesses into a job of `circuit` whose
    /// partitions each hold their witness's share of the budget; with
    /// `keep`, also the witnesses as a store keeps them.
    pub fn decode(
        &self,
        circuit: &str,
        witnesses: Witnesses,
        priority: Priority,
        door: Door,
        keep: bool,
    ) -> Result<Decoded, RequestError> {
        let served = self.circuits.get(circuit)?;
        let kind = served.kind.as_ref();
        let (work, stored, decoding) = match witnesses {
            Witnesses::Json(partitions) => {
                let count = partitions.len() as u64;
                let mut held = match kind.witness_bytes() {
                    Some(per) => Some((per, self.engine.hold_witness(per * count, kind.key())?)),
                    None => None,
                };
                let stored = if keep {
                    partitions.iter().cloned().map(StoredWitness::Json).collect()
                } else {
                    Vec::new()
                };
                let work = partitions
                    .into_iter()
                    .enumerate()
                    .map(|(i, w)| {
                        let f = kind.partition(i, w)?;
                        Ok(match &mut held {
                            Some((per, hold)) => holding(f, hold.split(*per)),
                            None => f,
                        })
                    })
                    .collect::<Result<Vec<SynthesisFn>, RequestError>>()?;
                (work, stored, None)
            }
            Witnesses::Binary { bytes, mut held } => {
                let f = kind.partition_from_bytes(0, &bytes)?;
                // The decoded values keep their share; the body's share goes
                // when the caller drops it (after a store has the body).
                let kept = held.split(kind.witness_bytes().unwrap_or(0));
                let stored = if keep { vec![StoredWitness::Binary(bytes)] } else { Vec::new() };
                (vec![holding(f, kept)], stored, Some(held))
            }
        };
        Ok(Decoded { spec: self.spec(circuit, served, priority, door, work), stored, decoding })
    }

    /// One partition of a job, from its witness as a store kept it (a
    /// fleet's claim), holding its place in the budget until it ends.
    pub fn decode_stored(
        &self,
        circuit: &str,
        index: usize,
        witness: &StoredWitness,
        priority: Priority,
    ) -> Result<JobSpec, RequestError> {
        let served = self.circuits.get(circuit)?;
        let kind = served.kind.as_ref();
        let held = match kind.witness_bytes() {
            Some(bytes) => Some(self.engine.hold_witness(bytes, kind.key())?),
            None => None,
        };
        let work = match witness {
            StoredWitness::Json(v) => kind.partition(index, v.clone()),
            StoredWitness::Binary(b) => kind.partition_from_bytes(index, b),
        }?;
        let work = match held {
            Some(held) => holding(work, held),
            None => work,
        };
        // A claimed partition's engine job is this worker's own: its door
        // is the fleet's record (the queue's `jobs.door`).
        Ok(self.spec(circuit, served, priority, Door::default(), vec![work]))
    }

    fn spec(
        &self,
        circuit: &str,
        served: &Served,
        priority: Priority,
        door: Door,
        partitions: Vec<SynthesisFn>,
    ) -> JobSpec {
        let kind: &dyn CircuitKind = served.kind.as_ref();
        JobSpec {
            circuit: circuit.to_string(),
            priority,
            door,
            key: kind.key().clone(),
            verifier: self.verify_proofs.then(|| served.verifier.clone()),
            witness_check: kind.witness_check(),
            abc_from: kind.abc_from(),
            partitions,
        }
    }
}

/// Wraps a partition's synthesis job so that it holds its witness's place
/// in the budget for as long as the job lives (until the partition ends).
fn holding(synthesize: SynthesisFn, held: HeldWitness) -> SynthesisFn {
    Arc::new(move || {
        let _held = &held;
        synthesize()
    })
}
