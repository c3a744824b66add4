//! Jobs run by this worker's engine, written to its journal (when it has
//! one) before they are acknowledged, with their idempotency keys, and taken
//! up again after a restart ([`LocalJobs::recover`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::intake::{Idempotency, Intake, RequestError, Submitted, Witnesses};
use super::jobs::{Jobs, Unavailable};
use crate::config::OnRestart;
use crate::jobs::journal::{AcceptedJob, EndedRecord, Journal, Recovered, RecoveredWitness, UnfinishedJob};
use crate::pipeline::{
    now_ms, Door, EndedJob, EndedPartition, Engine, JobId, JobStatus, Outcome, Priority, ProvedPartition,
    Stage,
};

/// This worker's jobs: the engine runs them, the journal keeps them.
pub struct LocalJobs {
    intake: Arc<Intake>,
    engine: Arc<Engine>,
    journal: Option<Arc<dyn Journal>>,
    /// Idempotency key → (its job, the digest of the request that made it).
    keys: Mutex<HashMap<String, (JobId, [u8; 32])>>,
    /// Serialises idempotent submissions.
    idempotent: Mutex<()>,
    /// Partitions of each class queued at most (`server.max_queued_partitions`).
    max_queued: usize,
    /// Partitions of submissions that passed the queue bound and are being
    /// decoded and recorded, by class (lowest first): counted against the
    /// bound with those queued, so that concurrent submissions cannot pass it
    /// together.
    admitting: Mutex<[usize; 4]>,
}

/// Places under a class's queue bound, held from the bound's check until
/// the partitions are in the engine's queue (or refused).
struct Places<'a> {
    admitting: &'a Mutex<[usize; 4]>,
    priority: Priority,
    count: usize,
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        self.admitting.lock().unwrap_or_else(|e| e.into_inner())[self.priority.rank()] -= self.count;
    }
}

impl LocalJobs {
    pub fn new(
        intake: Arc<Intake>,
        engine: Arc<Engine>,
        journal: Option<Arc<dyn Journal>>,
        max_queued: usize,
    ) -> Self {
        Self {
            intake,
            engine,
            journal,
            keys: Mutex::default(),
            idempotent: Mutex::new(()),
            max_queued,
            admitting: Mutex::new([0; 4]),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, (JobId, [u8; 32])>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The outcome of an earlier submission under `idem`'s key, if any: its
    /// job for the same request, `KeyReused` for another; none once that job
    /// failed or was cancelled (a retry then runs again).
    fn earlier(&self, idem: &Idempotency) -> Option<Result<Submitted, RequestError>> {
        let &(job, digest) = self.keys().get(&idem.key)?;
        if matches!(self.engine.outcome(job), Some(Some(Outcome::Failed | Outcome::Cancelled))) {
            return None;
        }
        Some(if digest == idem.digest {
            Ok(Submitted::Existing(job))
        } else {
            Err(RequestError::KeyReused { key: idem.key.clone(), job })
        })
    }

    /// Takes `count` places under `priority`'s queue bound, or says it is
    /// full. Each class has its own bound, so that sealing filling the queue
    /// never refuses a WinningPoSt.
    fn places(&self, priority: Priority, count: usize) -> Result<Places<'_>, RequestError> {
        let mut admitting = self.admitting.lock().unwrap_or_else(|e| e.into_inner());
        let class = priority.rank();
        let queued = self.engine.queued_by_priority()[class] + admitting[class];
        let limit = self.max_queued;
        if queued + count > limit {
            return Err(RequestError::QueueFull { priority, queued, limit });
        }
        admitting[class] += count;
        Ok(Places { admitting: &self.admitting, priority, count })
    }

    /// Checks, records (journal first) and starts a job under `id`; its
    /// `proved` partitions (a job run again) keep their proofs.
    fn start(
        &self,
        id: JobId,
        circuit: &str,
        witnesses: Witnesses,
        (priority, door): (Priority, Door),
        idempotency: Option<&Idempotency>,
        proved: Vec<ProvedPartition>,
    ) -> Result<(), RequestError> {
        let decoded = self.intake.decode(circuit, witnesses, priority, door, self.journal.is_some())?;
        self.engine.check(&decoded.spec)?;
        if let Some(journal) = &self.journal {
            journal.accepted(&AcceptedJob {
                id,
                circuit: circuit.to_string(),
                priority,
                door,
                witnesses: decoded.stored,
                idempotency: idempotency.map(|i| (i.key.clone(), i.digest)),
            })?;
        }
        drop(decoded.decoding);
        if let Err(e) = self.engine.submit_as(id, decoded.spec, proved) {
            // Recorded, then refused (the engine began to drain meanwhile):
            // the journal must not run it after a restart either.
            if let Some(journal) = &self.journal {
                journal.job_ended(id, Outcome::Failed, Some(&e.to_string()));
            }
            return Err(e.into());
        }
        if let Some(idem) = idempotency {
            self.keys().insert(idem.key.clone(), (id, idem.digest));
        }
        Ok(())
    }

    /// Takes up what the journal held: ended jobs are served again until they
    /// expire; unfinished ones run again from their witnesses (or end failed,
    /// by `on_restart`), under their own ids.
    pub fn recover(&self, recovered: Recovered, on_restart: OnRestart) {
        for EndedRecord { job, idempotency } in recovered.ended {
            match self.intake.circuits.get(&job.circuit) {
                Ok(served) => {
                    if let Some((key, digest)) = idempotency {
                        self.keys().insert(key, (job.id, digest));
                    }
                    self.engine.restore_ended(job, served.kind.key().clone());
                }
                Err(_) => tracing::warn!(job = %job.id, circuit = %job.circuit,
                    "a journaled job's circuit is no longer served; its results are not served"),
            }
        }
        for unfinished in recovered.unfinished {
            let (id, circuit, count, priority, door) = (
                unfinished.id,
                unfinished.circuit.clone(),
                unfinished.witnesses.len(),
                unfinished.priority,
                unfinished.door,
            );
            let proved = unfinished.proved.len();
            match self.rerun(unfinished, on_restart) {
                Ok(()) => tracing::info!(job = %id, circuit = %circuit, partitions = count, proved,
                    "running a job again that was accepted before the restart (its proved partitions kept)"),
                Err(reason) => {
                    tracing::warn!(job = %id, circuit = %circuit, "a job accepted before the restart failed: {reason}");
                    self.fail_recovered(id, circuit, (priority, door), count, reason);
                }
            }
        }
    }

    /// Submits a journaled job again, or says why it cannot run.
    fn rerun(&self, job: UnfinishedJob, on_restart: OnRestart) -> Result<(), String> {
        let UnfinishedJob { id, circuit, priority, door, witnesses, idempotency, proved } = job;
        if on_restart == OnRestart::Fail {
            return Err("provd restarted before the job ended (jobs.on_restart = \"fail\")".into());
        }
        let served = self
            .intake
            .circuits
            .get(&circuit)
            .map_err(|_| format!("its circuit '{circuit}' is no longer served"))?;
        // Proofs kept from before the restart must hold under the key served
        // now (it may have been replaced meanwhile): those that do not are
        // proved again, so that a job never mixes proofs of two keys.
        let (proved, stale): (Vec<_>, Vec<_>) =
            proved.into_iter().partition(|p| served.verifier.verify(&p.proof, &p.public_inputs).is_ok());
        if !stale.is_empty() {
            let partitions: Vec<usize> = stale.iter().map(|p| p.index).collect();
            tracing::warn!(job = %id, %circuit, ?partitions,
                "proofs kept from before the restart do not verify under the key served now: proved again");
        }
        let witnesses = match witnesses.as_slice() {
            // The memory is held before the bytes are read.
            [RecoveredWitness::Binary(at)] => {
                let (_, held) = self.intake.hold_binary_witness(&circuit).map_err(|e| e.to_string())?;
                let journal = self.journal.as_ref().ok_or("no journal holds its witness")?;
                let bytes = journal
                    .read_witness(at)
                    .map_err(|e| format!("its witness could not be read after the restart: {e}"))?;
                Witnesses::Binary { bytes, held }
            }
            _ => Witnesses::Json(
                witnesses
                    .into_iter()
                    .map(|w| match w {
                        RecoveredWitness::Json(v) => Ok(v),
                        RecoveredWitness::Binary(_) => Err("a binary witness among several".to_string()),
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let idempotency = idempotency.map(|(key, digest)| Idempotency { key, digest });
        self.start(id, &circuit, witnesses, (priority, door), idempotency.as_ref(), proved)
            .map_err(|e| e.to_string())
    }

    /// Ends a journaled job that cannot run again after a restart, saying
    /// why, and serves it (failed) until it expires.
    fn fail_recovered(
        &self,
        id: JobId,
        circuit: String,
        (priority, door): (Priority, Door),
        partitions: usize,
        reason: String,
    ) {
        if let Some(journal) = &self.journal {
            journal.job_ended(id, Outcome::Failed, Some(&reason));
        }
        let Ok(served) = self.intake.circuits.get(&circuit) else { return };
        let failed = EndedPartition {
            stage: Stage::Failed,
            proof: None,
            public_inputs: Vec::new(),
            error: Some(reason.clone()),
        };
        let now = now_ms();
        let key = served.kind.key().clone();
        self.engine.restore_ended(
            EndedJob {
                id,
                circuit,
                priority,
                door,
                outcome: Outcome::Failed,
                error: Some(reason),
                created_ms: now,
                ended_ms: now,
                partitions: vec![failed; partitions],
            },
            key,
        );
    }
}

impl Jobs for LocalJobs {
    fn submit(
        &self,
        circuit: &str,
        witnesses: Witnesses,
        priority: Priority,
        door: Door,
        idempotency: Option<Idempotency>,
    ) -> Result<Submitted, RequestError> {
        // Idempotent submissions one at a time, from the check to the key
        // remembered, so two concurrent retries make one job. A retry is
        // answered before the queue and its limits are looked at.
        let _one_at_a_time =
            idempotency.as_ref().map(|_| self.idempotent.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(idem) = &idempotency {
            if let Some(earlier) = self.earlier(idem) {
                return earlier;
            }
        }
        self.intake.admit(circuit, &witnesses)?;
        let _places = self.places(priority, witnesses.count())?;
        let id = JobId::new();
        self.start(id, circuit, witnesses, (priority, door), idempotency.as_ref(), Vec::new())?;
        Ok(Submitted::New(id))
    }

    fn status(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        Ok(self.engine.status(id))
    }

    fn has_ended(&self, id: JobId) -> Result<Option<bool>, Unavailable> {
        Ok(self.engine.outcome(id).map(|o| o.is_some()))
    }

    /// With a journal, the cancel is written down before it is answered,
    /// so that a crash right after it does not run the job again.
    fn cancel(&self, id: JobId) -> Result<Option<JobStatus>, Unavailable> {
        if !self.engine.cancel(id) {
            return Ok(None);
        }
        if let Some(journal) = &self.journal {
            journal.cancelled(id)?;
        }
        Ok(self.engine.status(id))
    }

    fn drain(&self, grace: Duration) -> (usize, usize) {
        let ended = self.engine.drain(grace);
        if let Some(journal) = &self.journal {
            journal.flush();
        }
        ended
    }

    fn queued(&self) -> [usize; 4] {
        self.engine.queued_by_priority()
    }

    /// Unready while the journal holds back ends it could not write: work
    /// accepted now could not have its end recorded either.
    fn unready(&self) -> Option<String> {
        self.journal.as_ref().and_then(|j| j.behind())
    }

    fn maintain(&self, age: Duration) {
        if let Some(journal) = &self.journal {
            journal.flush();
        }
        let forgotten = self.engine.forget_ended(age);
        if !forgotten.is_empty() {
            self.keys().retain(|_, (id, _)| !forgotten.contains(id));
        }
        if let Some(journal) = &self.journal {
            journal.forget_ended(age.as_millis() as u64);
        }
    }
}
