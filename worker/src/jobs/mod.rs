//! The job table: jobs and their partitions' states, behind one store
//! interface. [`MemoryStore`] keeps the live table in this process; a
//! [`journal::Journal`] beside it (SQLite by default) writes every accepted
//! job down before it is acknowledged, so that a restart loses none.

mod job;
pub mod journal;
mod memory;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use job::Ticket;
pub use job::{Job, JobId, JobSpec, JobStatus, PartitionStatus, StageTimes, SynthesisFn, WitnessCheck};
pub use memory::MemoryStore;

/// Where accepted jobs are kept while they run and after they end, until
/// their results expire.
pub trait JobStore: Send + Sync {
    /// Records a newly accepted job.
    fn insert(&self, job: Arc<Job>);
    fn get(&self, id: JobId) -> Option<Arc<Job>>;
    /// The `n` most recently accepted jobs, newest first.
    fn recent(&self, n: usize) -> Vec<Arc<Job>>;
    /// Jobs that have not ended.
    fn unfinished(&self) -> Vec<Arc<Job>>;
    /// Every job in the table.
    fn all(&self) -> Vec<Arc<Job>>;
    /// Drops ended jobs that ended more than `age` ago (and their
    /// idempotency keys).
    fn forget_ended(&self, age: Duration);

    /// The job submitted under idempotency key `key`, with the digest of the
    /// request that created it.
    fn by_idempotency_key(&self, key: &str) -> Option<(JobId, [u8; 32])>;

    /// Records that `key` (for a request with `digest`) created job `id`.
    fn remember_idempotency_key(&self, key: &str, digest: [u8; 32], id: JobId);
}
