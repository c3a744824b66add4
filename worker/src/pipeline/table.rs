//! The engine's table of jobs: running ones, and ended ones until their
//! results expire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::job::{Job, JobId};

/// Jobs by id, in this process's memory.
#[derive(Default)]
pub(crate) struct JobTable {
    jobs: Mutex<HashMap<JobId, Arc<Job>>>,
}

impl JobTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, job: Arc<Job>) {
        self.lock().insert(job.id, job);
    }

    pub fn get(&self, id: JobId) -> Option<Arc<Job>> {
        self.lock().get(&id).cloned()
    }

    /// The `n` most recently accepted jobs, newest first.
    pub fn recent(&self, n: usize) -> Vec<Arc<Job>> {
        let mut jobs: Vec<Arc<Job>> = self.lock().values().cloned().collect();
        jobs.sort_unstable_by_key(|j| std::cmp::Reverse(j.created()));
        jobs.truncate(n);
        jobs
    }

    /// Jobs that have not ended.
    pub fn unfinished(&self) -> Vec<Arc<Job>> {
        self.lock().values().filter(|j| j.outcome().is_none()).cloned().collect()
    }

    pub fn all(&self) -> Vec<Arc<Job>> {
        self.lock().values().cloned().collect()
    }

    /// Drops jobs that ended more than `age` ago; returns their ids.
    pub fn forget_ended(&self, age: Duration) -> Vec<JobId> {
        let mut forgotten = Vec::new();
        self.lock().retain(|id, j| {
            let keep = j.outcome().is_none() || j.ended_for() < age;
            if !keep {
                forgotten.push(*id);
            }
            keep
        });
        forgotten
    }
}
