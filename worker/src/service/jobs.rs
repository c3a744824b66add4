//! Where accepted jobs go: [`Jobs`], with one implementation per job store,
//! chosen once at start-up: this worker's engine with its journal
//! ([`LocalJobs`](super::local::LocalJobs)), or the fleet's PostgreSQL
//! queue that every worker claims from ([`FleetJobs`](super::fleet::FleetJobs)).

use std::time::Duration;

use super::intake::{Idempotency, RequestError, Submitted, Witnesses};
use super::snapshot::FleetSnapshot;
use crate::fleet::QueueError;
use crate::jobs::journal::JournalError;
use crate::pipeline::{Door, JobId, JobStatus, Priority};

/// The job store could not be reached or written: retry later (503).
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// The fleet's queue.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// This worker's journal.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Submit, look up, cancel and drain jobs, whichever store holds them.
pub trait Jobs: Send + Sync {
    /// Decodes (through the intake) and accepts a job of `circuit`, come
    /// through `door`; with an idempotency key, a retry of the same request
    /// returns the job the first one created, unless that job failed or was
    /// cancelled: then the retry makes a new job, which takes the key over.
    fn submit(
        &self,
        circuit: &str,
        witnesses: Witnesses,
        priority: Priority,
        door: Door,
        idempotency: Option<Idempotency>,
    ) -> Result<Submitted, RequestError>;

    /// A job's state; `None` for an unknown (or expired) job.
    fn status(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable>;

    /// Whether the job has ended; `None` for an unknown job. Cheap: for
    /// waiting without a thread.
    fn has_ended(&self, id: JobId) -> Result<Option<bool>, Unavailable>;

    /// Cancels a job and returns its state; `None` if there is no such job.
    fn cancel(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable>;

    /// Stops taking jobs and waits up to `grace` for accepted ones; returns
    /// (finished, cancelled).
    fn drain(&self, grace: Duration) -> (usize, usize);

    /// Partitions waiting for a worker, by class (lowest first): this
    /// worker's queue, or the fleet's (as its last heartbeat read it).
    fn queued(&self) -> [usize; 4];

    /// Why this store should not be sent work now, if it should not.
    fn unready(&self) -> Option<String>;

    /// What the store does once a tick: writes what it could not write
    /// before, and forgets jobs that ended more than `retention` ago.
    fn maintain(&self, retention: Duration);

    /// In fleet mode: this worker's claims and the fleet's queue.
    fn fleet(&self) -> Option<FleetSnapshot> {
        None
    }
}
