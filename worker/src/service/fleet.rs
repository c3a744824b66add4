//! Fleet mode (`jobs.store` a PostgreSQL URL): jobs go to the fleet's
//! queue, where every worker claims partitions; this worker's claims run on
//! its own engine through the same intake as a submitted job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::intake::{Idempotency, Intake, Refusal, RequestError, Submitted, Witnesses};
use super::jobs::{Jobs, Unavailable};
use super::snapshot::FleetSnapshot;
use crate::fleet::{Claim, Fleet, QueueError, RunError, Runner};
use crate::jobs::journal::AcceptedJob;
use crate::pipeline::{Door, Engine, JobId, JobStatus, Priority};

/// Jobs in the fleet's queue; the partitions this worker claims run on its engine.
pub struct FleetJobs {
    intake: Arc<Intake>,
    engine: Arc<Engine>,
    fleet: Arc<Fleet>,
    /// Partitions waiting in the fleet's queue at most (`server.max_queued_partitions`).
    max_queued: usize,
}

impl FleetJobs {
    pub fn new(intake: Arc<Intake>, engine: Arc<Engine>, fleet: Arc<Fleet>, max_queued: usize) -> Self {
        Self { intake, engine, fleet, max_queued }
    }
}

impl Jobs for FleetJobs {
    fn submit(
        &self,
        circuit: &str,
        witnesses: Witnesses,
        priority: Priority,
        door: Door,
        idempotency: Option<Idempotency>,
    ) -> Result<Submitted, RequestError> {
        // A retry is answered by the queue's database, with the submission.
        self.intake.admit(circuit, &witnesses)?;
        // Decoded here only to refuse bad witnesses before they are queued.
        let decoded = self.intake.decode(circuit, witnesses, priority, door, true)?;
        let job = AcceptedJob {
            id: JobId::new(),
            circuit: circuit.to_string(),
            priority,
            door,
            witnesses: decoded.stored,
            idempotency: idempotency.map(|i| (i.key, i.digest)),
        };
        let worker = self.fleet.worker_id().to_string();
        match self.fleet.with_queue(|q| q.submit(&job, &worker, self.max_queued)) {
            Ok((id, true)) => Ok(Submitted::New(id)),
            Ok((id, false)) => Ok(Submitted::Existing(id)),
            Err(QueueError::KeyReused { key, job }) => Err(RequestError::KeyReused { key, job }),
            Err(e @ QueueError::WitnessTooLarge { .. }) => Err(RequestError::TooLarge(e.to_string())),
            Err(QueueError::Full { priority, queued, limit }) => {
                Err(RequestError::QueueFull { priority, queued, limit })
            }
            Err(e) => Err(RequestError::Queue(e)),
        }
    }

    fn status(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        Ok(self.fleet.with_queue(|q| q.status(id))?)
    }

    fn has_ended(&self, id: JobId) -> Result<Option<bool>, Unavailable> {
        Ok(self.fleet.has_ended(id)?)
    }

    /// The workers holding its partitions stop them at their next heartbeat.
    fn cancel(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        match self.fleet.with_queue(|q| q.cancel(id))? {
            true => self.status(id),
            false => Ok(None),
        }
    }

    /// Claims nothing more; finishes what is held and writes it back (what
    /// the grace cannot finish goes back to the queue when its lease runs out).
    fn drain(&self, grace: Duration) -> (usize, usize) {
        let start = Instant::now();
        self.fleet.stop_claiming();
        let left = self.engine.drain(grace);
        self.fleet.join(grace.saturating_sub(start.elapsed()).max(Duration::from_secs(1)));
        left
    }

    fn queued(&self) -> [usize; 4] {
        self.fleet.stats().queued_by_priority.map(|n| n as usize)
    }

    fn unready(&self) -> Option<String> {
        self.fleet.unready()
    }

    fn maintain(&self, age: Duration) {
        // Local runs of claims; the queue expires the fleet's jobs itself.
        self.engine.forget_ended(age);
    }

    fn fleet(&self) -> Option<FleetSnapshot> {
        let q = self.fleet.stats();
        Some(FleetSnapshot {
            worker: self.fleet.worker_id().to_string(),
            claimed_here: self.fleet.claimed(),
            queued: q.queued_partitions,
            claimed: q.claimed_partitions,
            oldest_queued_seconds: q.oldest_queued_seconds,
            unready: self.fleet.unready(),
        })
    }
}

/// Runs this worker's claims: each partition through the intake, as a job
/// of one on the engine.
pub struct ClaimRunner {
    pub intake: Arc<Intake>,
    pub engine: Arc<Engine>,
}

impl Runner for ClaimRunner {
    fn circuits(&self) -> Vec<(String, String)> {
        self.intake
            .circuits
            .iter()
            .map(|(name, c)| (name.clone(), hex::encode(c.kind.key().fingerprint())))
            .collect()
    }

    fn has_room(&self) -> bool {
        self.engine.queued_partitions() == 0 && self.engine.none_in_service().is_none()
    }

    fn run(&self, claim: &Claim) -> Result<JobId, RunError> {
        // Refused for good, the job fails (no worker would do better);
        // otherwise the claim goes back to the queue.
        let refused = |e: RequestError| match e.refusal() {
            Refusal::BadInput | Refusal::TooLarge | Refusal::UnsupportedBody => {
                RunError::Invalid(e.to_string())
            }
            _ => RunError::NotNow(e.to_string()),
        };
        let spec = self
            .intake
            .decode_stored(&claim.circuit, claim.index, &claim.witness, claim.priority)
            .map_err(refused)?;
        self.engine.submit(spec).map_err(|e| refused(e.into()))
    }

    fn status(&self, local: JobId) -> Option<JobStatus> {
        self.engine.status(local)
    }

    fn cancel(&self, local: JobId) {
        self.engine.cancel(local);
    }
}
