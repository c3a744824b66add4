//! The jobs the API waits on (`?wait=true`), read together: one query a
//! poll for all of them, on the watcher thread's own connection, rather than
//! a query per waiter per poll through the API's one connection (with 500
//! waiters, that queued every submission behind them for seconds).
//!
//! A cache in front of the database, never instead of it: a job is read
//! directly the first time it is asked about (and whenever the watcher has
//! not read it lately, the database being away), so an answer is never
//! staler than [`FRESH`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::queue::{Queue, QueueError};
use crate::pipeline::JobId;

/// How old a read may be and still answer a waiter.
const FRESH: Duration = Duration::from_secs(2);

/// A job not asked about for this long is no longer read.
const FORGET: Duration = Duration::from_secs(10);

/// Jobs being waited on, and whether each had ended when last read.
#[derive(Default)]
pub(super) struct Ends {
    watched: Mutex<HashMap<JobId, Watched>>,
}

struct Watched {
    ended: bool,
    read: Instant,
    asked: Instant,
}

impl Ends {
    /// Whether the job has ended, as read lately; `None`: it must be read
    /// directly (then [`Ends::record`]).
    pub(super) fn cached(&self, id: JobId) -> Option<bool> {
        let mut watched = super::lock(&self.watched);
        let w = watched.get_mut(&id)?;
        w.asked = Instant::now();
        (w.read.elapsed() < FRESH).then_some(w.ended)
    }

    /// A direct read's answer: a job that has not ended is watched from now.
    pub(super) fn record(&self, id: JobId, ended: Option<bool>) {
        let mut watched = super::lock(&self.watched);
        match ended {
            Some(ended) => {
                let now = Instant::now();
                watched.insert(id, Watched { ended, read: now, asked: now });
            }
            None => {
                watched.remove(&id);
            }
        }
    }

    /// Reads every watched job that had not ended, in one query; forgets
    /// those nobody asked about lately and those gone from the queue.
    pub(super) fn poll(&self, queue: &mut Queue) -> Result<(), QueueError> {
        let ids: Vec<JobId> = {
            let mut watched = super::lock(&self.watched);
            watched.retain(|_, w| w.asked.elapsed() < FORGET);
            watched.iter().filter(|(_, w)| !w.ended).map(|(id, _)| *id).collect()
        };
        if ids.is_empty() {
            return Ok(());
        }
        let read = queue.ended_among(&ids)?;
        let now = Instant::now();
        let mut watched = super::lock(&self.watched);
        for id in ids {
            match read.get(&id) {
                Some(&ended) => {
                    if let Some(w) = watched.get_mut(&id) {
                        (w.ended, w.read) = (ended, now);
                    }
                }
                // Gone (its retention passed): a direct read says so.
                None => {
                    watched.remove(&id);
                }
            }
        }
        Ok(())
    }

    pub(super) fn is_empty(&self) -> bool {
        super::lock(&self.watched).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_read_answers_and_an_old_one_sends_the_caller_to_the_database() {
        let ends = Ends::default();
        let (running, gone) = (JobId::new(), JobId::new());
        assert_eq!(ends.cached(running), None, "never read: read it directly");
        ends.record(running, Some(false));
        ends.record(gone, None);
        assert_eq!(ends.cached(running), Some(false));
        assert_eq!(ends.cached(gone), None, "an unknown job is not watched");
        assert!(!ends.is_empty());
        super::super::lock(&ends.watched).get_mut(&running).unwrap().read -= FRESH;
        assert_eq!(ends.cached(running), None, "a stale read is not an answer");
    }
}
