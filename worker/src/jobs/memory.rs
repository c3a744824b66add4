//! The job table in this process's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Job, JobId, JobStore};

/// Jobs in a map, lost when the process ends.
#[derive(Default)]
pub struct MemoryStore {
    jobs: Mutex<HashMap<JobId, Arc<Job>>>,
    /// Idempotency key → (job, digest of its request).
    keys: Mutex<HashMap<String, (JobId, [u8; 32])>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl JobStore for MemoryStore {
    fn insert(&self, job: Arc<Job>) {
        self.lock().insert(job.id, job);
    }

    fn get(&self, id: JobId) -> Option<Arc<Job>> {
        self.lock().get(&id).cloned()
    }

    fn recent(&self, n: usize) -> Vec<Arc<Job>> {
        let mut jobs: Vec<Arc<Job>> = self.lock().values().cloned().collect();
        jobs.sort_unstable_by_key(|j| std::cmp::Reverse(j.created()));
        jobs.truncate(n);
        jobs
    }

    fn unfinished(&self) -> Vec<Arc<Job>> {
        self.lock().values().filter(|j| j.outcome().is_none()).cloned().collect()
    }

    fn all(&self) -> Vec<Arc<Job>> {
        self.lock().values().cloned().collect()
    }

    fn forget_ended(&self, age: Duration) {
        let mut jobs = self.lock();
        jobs.retain(|_, j| j.outcome().is_none() || j.ended_for() < age);
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, (id, _)| jobs.contains_key(id));
    }

    fn by_idempotency_key(&self, key: &str) -> Option<(JobId, [u8; 32])> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).get(key).copied()
    }

    fn remember_idempotency_key(&self, key: &str, digest: [u8; 32], id: JobId) {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_string(), (id, digest));
    }
}
