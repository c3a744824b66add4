//! The fleet's job queue in PostgreSQL: every statement a worker sends.
//!
//! A partition moves `queued → claimed → succeeded | failed | cancelled`. A
//! claim is a lease (`lease_until_ms`, renewed by heartbeat) taken with
//! `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's rows; each
//! claim raises `attempt`, and a result is written only by the worker whose
//! claim (worker and attempt) still holds the row: a worker that lost its
//! lease cannot write. Proofs go to a table keyed by (job, partition), so a
//! partition's proof is written once whatever races. Times are the
//! database's clock (`clock_timestamp()`), never a worker's.
//!
//! Every transaction that locks both takes a job's partition rows before
//! the job's own row, so none waits in a cycle through a job's row. Two that
//! fail the same job at the same instant (each holding its own partition,
//! then cancelling the others) can still wait on each other's partitions:
//! PostgreSQL aborts one ("deadlock detected"), its worker is unready for a
//! beat and retries, and finds its claim fenced; the job fails once.

use std::collections::HashMap;

use blstrs::Scalar;
use postgres::{Client, NoTls, Transaction};

use crate::groth16::Proof;
use crate::jobs::journal::{inputs_from_text, inputs_to_text, AcceptedJob, StoredWitness};
use crate::pipeline::{JobId, JobStatus, PartitionStatus, StageTimes};
use crate::telemetry::labels::{Outcome, Priority, Stage};

mod migrations {
    refinery::embed_migrations!("migrations/postgres");
}

/// Milliseconds since the epoch, by the database's clock.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Why the queue could not be used.
/// The advisory lock that submissions take to count the queue and insert
/// as one step (any constant no other lock of the schema uses; idempotency
/// keys lock on `hashtext(key)`, an int4, in the one-argument key space too,
/// so this one lies outside the int4 range).
const QUEUE_BOUND_LOCK: i64 = 0x7072_6f76_6471_0001;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The database is unreachable or refused a statement: retry later.
    #[error("job queue database: {}", why(.0))]
    Database(postgres::Error),
    #[error("job queue schema migration: {0}")]
    Migration(#[from] refinery::Error),
    /// A row the queue cannot read (written by hand with a bad id, say).
    #[error("job queue row: {0}")]
    Corrupt(String),
    /// This worker's key for a circuit is not the one the fleet proves with.
    #[error(
        "circuit '{circuit}': this worker's proving key (fingerprint {ours}) is not the fleet's ({theirs}, first served by worker {first}); every worker must load the same key file"
    )]
    KeyMismatch { circuit: String, ours: String, theirs: String, first: String },
    /// A client reused an idempotency key for a different request.
    #[error(
        "idempotency key '{key}' was used for another request (job {job}); use a new key for a new request"
    )]
    KeyReused { key: String, job: JobId },
    /// The fleet's queue holds its bound of waiting partitions: retry later.
    #[error(
        "{queued} {} partitions are already waiting in the fleet's queue (limit {limit} for each class); retry later",
        priority.name()
    )]
    Full { priority: Priority, queued: usize, limit: usize },
    /// A witness larger than one PostgreSQL value holds: no retry helps.
    #[error(
        "partition {index}'s witness is {bytes} bytes; the fleet's PostgreSQL queue holds at most {MAX_WITNESS_BYTES} bytes in one value: prove it on a worker with its own journal (jobs.store = \"sqlite\")"
    )]
    WitnessTooLarge { index: usize, bytes: usize },
}

impl From<postgres::Error> for QueueError {
    fn from(e: postgres::Error) -> Self {
        QueueError::Database(e)
    }
}

/// A driver error with its cause, on one line. The driver's own text is only
/// "db error" or "error connecting to server"; the why (the server's message,
/// detail and SQLSTATE, or the refused connection) is in its source. Spelled
/// out here, not left as this error's source, so that the message an
/// operator sees in a log line or in `/readyz` says it.
fn why(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let detail = db.detail().map(|d| format!("; {}", d.replace('\n', " "))).unwrap_or_default();
        return format!("{e}: {}: {}{detail} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The most bytes PostgreSQL holds in one field (`BYTEA` or `TEXT`): 1 GB.
pub const MAX_WITNESS_BYTES: usize = (1 << 30) - 1;

/// Refuses partition `index`'s witness of `bytes` bytes if one field
/// cannot hold it (the database would refuse the row, and the client would
/// be told to retry a request that can never succeed).
fn within_a_value(index: usize, bytes: usize) -> Result<(), QueueError> {
    if bytes > MAX_WITNESS_BYTES {
        return Err(QueueError::WitnessTooLarge { index, bytes });
    }
    Ok(())
}

impl QueueError {
    /// Whether trying again later may succeed (the database was away).
    pub fn is_retryable(&self) -> bool {
        matches!(self, QueueError::Database(_))
    }
}

/// A partition this worker holds, and the token that lets it write the result.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub job: JobId,
    pub index: usize,
    /// Its job's priority, which the claiming worker's engine serves it by.
    pub priority: Priority,
    /// The fencing token: the claim's number among the partition's claims.
    pub attempt: i32,
    pub circuit: String,
    pub witness: StoredWitness,
}

/// What a claimed partition came to.
#[derive(Clone, Debug)]
pub enum PartitionResult {
    Proved {
        proof: Box<Proof>,
        public_inputs: Vec<Scalar>,
    },
    /// `retryable`: another try (on any worker) may succeed (a device fault,
    /// a cancelled local run); else the job fails (a bad witness).
    Failed {
        reason: String,
        retryable: bool,
    },
}

/// Whether a result was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Taken,
    /// The claim no longer holds the row (its lease expired and the row was
    /// put back or claimed again, or the job was cancelled): the result is
    /// dropped.
    Fenced,
}

/// Leases that ran out, put back by [`Queue::expire`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    pub requeued: u64,
    /// Out of attempts: failed, and their jobs with them.
    pub failed: u64,
}

/// The fleet's queue as `/v1/status` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueStats {
    pub queued_partitions: u64,
    /// The queued partitions by class (lowest first).
    pub queued_by_priority: [u64; 4],
    pub claimed_partitions: u64,
    /// Age of the oldest queued partition, seconds (0 when none waits).
    pub oldest_queued_seconds: f64,
}

/// One connection to the queue's database.
pub struct Queue {
    client: Client,
}

impl Queue {
    /// Connects without migrating, within the URL's `connect_timeout` (5 s
    /// when it names none, so that an unreachable host cannot hold a thread
    /// for TCP's minutes).
    pub fn connect(url: &str) -> Result<Self, QueueError> {
        let mut config: postgres::Config = url.parse()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(5));
        }
        Ok(Self { client: config.connect(NoTls)? })
    }

    /// Connects and brings the schema up to date (refinery's migration
    /// history table makes this safe for workers starting together).
    pub fn connect_and_migrate(url: &str) -> Result<Self, QueueError> {
        let mut q = Self::connect(url)?;
        migrations::migrations::runner().run(&mut q.client)?;
        Ok(q)
    }

    /// Whether the connection is still usable (a failed statement may have
    /// closed it).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Records a worker's start and its heartbeats.
    pub fn heartbeat(&mut self, worker: &str) -> Result<(), QueueError> {
        self.client.execute(
            &format!(
                "INSERT INTO workers (id, started_ms, heartbeat_ms) VALUES ($1, {NOW_MS}, {NOW_MS})
                 ON CONFLICT (id) DO UPDATE SET heartbeat_ms = {NOW_MS}"
            ),
            &[&worker],
        )?;
        Ok(())
    }

    /// Records the key each served circuit is proved with, or checks it
    /// against the one the fleet already uses.
    pub fn register_circuit(
        &mut self,
        circuit: &str,
        fingerprint: &str,
        worker: &str,
    ) -> Result<(), QueueError> {
        self.client.execute(
            "INSERT INTO circuits (name, key_fingerprint, first_worker) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
            &[&circuit, &fingerprint, &worker],
        )?;
        let row = self
            .client
            .query_one("SELECT key_fingerprint, first_worker FROM circuits WHERE name = $1", &[&circuit])?;
        let (theirs, first): (String, String) = (row.get(0), row.get(1));
        if theirs != fingerprint {
            return Err(QueueError::KeyMismatch {
                circuit: circuit.into(),
                ours: fingerprint.into(),
                theirs,
                first,
            });
        }
        Ok(())
    }

    /// Adds a job and its partitions, queued, in one transaction. With an
    /// idempotency key already used by the same request, returns that
    /// job's id instead (`Ok((id, false))`).
    ///
    /// At most `max_queued` partitions of each class wait in the queue, the
    /// fleet over (sealing filling the queue never refuses a WinningPoSt):
    /// the count and the insert are one transaction under one advisory
    /// lock, so that submissions through several workers at once cannot
    /// pass the bound together.
    pub fn submit(
        &mut self,
        job: &AcceptedJob,
        worker: &str,
        max_queued: usize,
    ) -> Result<(JobId, bool), QueueError> {
        let witnesses: Vec<(Option<String>, Option<&[u8]>)> = job
            .witnesses
            .iter()
            .map(|w| match w {
                StoredWitness::Json(v) => (Some(v.to_string()), None),
                StoredWitness::Binary(b) => (None, Some(b.as_slice())),
            })
            .collect();
        for (i, (json, bin)) in witnesses.iter().enumerate() {
            within_a_value(i, json.as_ref().map_or(0, String::len) + bin.map_or(0, <[u8]>::len))?;
        }
        let mut tx = self.client.transaction()?;
        if let Some((key, digest)) = &job.idempotency {
            // Serialises submissions of one key: the second waits for the first's commit.
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[key])?;
            let row = tx
                .query_opt("SELECT id, request_digest, state FROM jobs WHERE idempotency_key = $1", &[key])?;
            if let Some(row) = row {
                let id = parse_id(row.get(0))?;
                let theirs: Option<Vec<u8>> = row.get(1);
                // A job that failed or was cancelled gives its key up to the
                // retry, which makes a new job.
                if matches!(row.get::<_, &str>(2), "failed" | "cancelled") {
                    tx.execute("UPDATE jobs SET idempotency_key = NULL WHERE id = $1", &[&id.to_string()])?;
                } else {
                    return match theirs.as_deref() == Some(digest.as_slice()) {
                        true => Ok((id, false)),
                        false => Err(QueueError::KeyReused { key: key.clone(), job: id }),
                    };
                }
            }
        }
        let priority = job.priority.rank() as i16;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&QUEUE_BOUND_LOCK])?;
        let queued: i64 = tx
            .query_one(
                "SELECT count(*) FROM partitions WHERE state = 'queued' AND priority = $1",
                &[&priority],
            )?
            .get(0);
        let queued = queued as usize;
        if queued + job.witnesses.len() > max_queued {
            return Err(QueueError::Full { priority: job.priority, queued, limit: max_queued });
        }
        let id = job.id.to_string();
        let (key, digest) = match &job.idempotency {
            Some((k, d)) => (Some(k.as_str()), Some(d.to_vec())),
            None => (None, None),
        };
        tx.execute(
            &format!(
                "INSERT INTO jobs (id, circuit, state, partitions, created_ms, idempotency_key, request_digest, submitted_by, priority, door)
                 VALUES ($1, $2, 'queued', $3, {NOW_MS}, $4, $5, $6, $7, $8)"
            ),
            &[&id, &job.circuit, &(job.witnesses.len() as i32), &key, &digest, &worker, &priority, &job.door.name()],
        )?;
        let insert = tx.prepare(&format!(
            "INSERT INTO partitions (job_id, idx, circuit, witness_json, witness_bin, state, queued_ms, priority)
             VALUES ($1, $2, $3, $4, $5, 'queued', {NOW_MS}, $6)"
        ))?;
        for (i, (json, bin)) in witnesses.iter().enumerate() {
            tx.execute(&insert, &[&id, &(i as i32), &job.circuit, json, bin, &priority])?;
        }
        tx.commit()?;
        Ok((job.id, true))
    }

    /// Claims the most urgent queued partition of one of `circuits`, leased
    /// for `lease_ms`; `None` when nothing waits. Urgency is as each
    /// worker's engine orders its own queues: by class, raised one class per
    /// `aging_ms` waited (up to high, never to critical), then the oldest.
    pub fn claim(
        &mut self,
        worker: &str,
        circuits: &[String],
        lease_ms: i64,
        aging_ms: i64,
    ) -> Result<Option<Claim>, QueueError> {
        let mut tx = self.client.transaction()?;
        let row = tx.query_opt(
            &format!(
                "UPDATE partitions p
                 SET state = 'claimed', attempt = p.attempt + 1, worker = $1, lease_until_ms = {NOW_MS} + $2
                 FROM (SELECT job_id, idx FROM partitions
                       WHERE state = 'queued' AND circuit = ANY($3)
                       ORDER BY CASE WHEN priority = 3 THEN 3
                                     ELSE least(2, priority + ({NOW_MS} - queued_ms) / $4) END DESC,
                                queued_ms, job_id, idx
                       LIMIT 1 FOR UPDATE SKIP LOCKED) c
                 WHERE p.job_id = c.job_id AND p.idx = c.idx
                 RETURNING p.job_id, p.idx, p.attempt, p.circuit, p.witness_json, p.witness_bin, p.priority"
            ),
            &[&worker, &lease_ms, &circuits, &aging_ms.max(1)],
        )?;
        let Some(row) = row else { return Ok(None) };
        let job: String = row.get(0);
        tx.execute("UPDATE jobs SET state = 'running' WHERE id = $1 AND state = 'queued'", &[&job])?;
        tx.commit()?;
        let witness = match (row.get::<_, Option<String>>(4), row.get::<_, Option<Vec<u8>>>(5)) {
            (Some(json), _) => {
                StoredWitness::Json(serde_json::from_str(&json).unwrap_or(serde_json::Value::Null))
            }
            (None, Some(bin)) => StoredWitness::Binary(bin),
            (None, None) => StoredWitness::Json(serde_json::Value::Null),
        };
        Ok(Some(Claim {
            job: parse_id(job)?,
            index: row.get::<_, i32>(1) as usize,
            priority: priority_of(row.get(6)),
            attempt: row.get(2),
            circuit: row.get(3),
            witness,
        }))
    }

    /// Extends the leases of `claims` (still this worker's) by `lease_ms`;
    /// returns the claims that no longer hold their rows, whose local runs
    /// should stop.
    pub fn renew(
        &mut self,
        worker: &str,
        claims: &[(JobId, usize, i32)],
        lease_ms: i64,
    ) -> Result<Vec<(JobId, usize)>, QueueError> {
        let mut lost = Vec::new();
        let mut tx = self.client.transaction()?;
        let renew = tx.prepare(&format!(
            "UPDATE partitions SET lease_until_ms = {NOW_MS} + $4
             WHERE job_id = $1 AND idx = $2 AND attempt = $3 AND worker = $5 AND state = 'claimed'"
        ))?;
        for (job, index, attempt) in claims {
            let n = tx.execute(&renew, &[&job.to_string(), &(*index as i32), attempt, &lease_ms, &worker])?;
            if n == 0 {
                lost.push((*job, *index));
            }
        }
        tx.commit()?;
        Ok(lost)
    }

    /// Writes a claimed partition's result, if the claim still holds the
    /// row; a job ends with its last partition, or with a failure that
    /// cannot be retried (`max_attempts` tries in all).
    pub fn finish(
        &mut self,
        worker: &str,
        claim: &Claim,
        result: &PartitionResult,
        max_attempts: i32,
    ) -> Result<Written, QueueError> {
        let mut tx = self.client.transaction()?;
        let (job, idx) = (claim.job.to_string(), claim.index as i32);
        let held = tx.query_opt(
            "SELECT 1 FROM partitions WHERE job_id = $1 AND idx = $2 AND attempt = $3 AND worker = $4
             AND state = 'claimed' FOR UPDATE",
            &[&job, &idx, &claim.attempt, &worker],
        )?;
        if held.is_none() {
            return Ok(Written::Fenced);
        }
        match result {
            PartitionResult::Proved { proof, public_inputs } => {
                tx.execute(
                    &format!(
                        "INSERT INTO proofs (job_id, idx, attempt, worker, proof, public_inputs, written_ms)
                         VALUES ($1, $2, $3, $4, $5, $6, {NOW_MS})"
                    ),
                    &[
                        &job,
                        &idx,
                        &claim.attempt,
                        &worker,
                        &proof.to_bytes().as_slice(),
                        &inputs_to_text(public_inputs),
                    ],
                )?;
                set_partition(&mut tx, &job, idx, "succeeded", None)?;
                // Under READ COMMITTED, two workers writing a job's last two
                // partitions at once would each see the other's still
                // claimed, and neither would end the job. Locking the job's
                // row serialises them: the second waits, and its check then
                // sees the first's commit.
                tx.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", &[&job])?;
                tx.execute(
                    &format!(
                        "UPDATE jobs SET state = 'succeeded', ended_ms = {NOW_MS}
                         WHERE id = $1 AND state = 'running'
                         AND NOT EXISTS (SELECT 1 FROM partitions WHERE job_id = $1 AND state <> 'succeeded')"
                    ),
                    &[&job],
                )?;
            }
            PartitionResult::Failed { reason, retryable } => {
                if *retryable && claim.attempt < max_attempts {
                    set_partition(&mut tx, &job, idx, "queued", Some(reason))?;
                } else {
                    set_partition(&mut tx, &job, idx, "failed", Some(reason))?;
                    let why = format!("partition {idx}: {reason}");
                    fail_job(&mut tx, &job, &why)?;
                }
            }
        }
        tx.commit()?;
        Ok(Written::Taken)
    }

    /// Hands a claim back to the queue untried: its attempt is not counted.
    pub fn release(&mut self, worker: &str, claim: &Claim) -> Result<(), QueueError> {
        self.client.execute(
            "UPDATE partitions SET state = 'queued', attempt = attempt - 1, worker = NULL, lease_until_ms = NULL
             WHERE job_id = $1 AND idx = $2 AND attempt = $3 AND worker = $4 AND state = 'claimed'",
            &[&claim.job.to_string(), &(claim.index as i32), &claim.attempt, &worker],
        )?;
        Ok(())
    }

    /// Puts back the partitions whose leases ran out (their workers died or
    /// were cut off), or fails them once out of attempts.
    pub fn expire(&mut self, max_attempts: i32) -> Result<Expired, QueueError> {
        let mut tx = self.client.transaction()?;
        let rows = tx.query(
            &format!(
                "UPDATE partitions
                 SET state = CASE WHEN attempt >= $1 THEN 'failed' ELSE 'queued' END,
                     error = 'the lease of worker ' || worker || ' ran out (attempt ' || attempt || ')',
                     worker = NULL, lease_until_ms = NULL
                 WHERE ctid IN (SELECT ctid FROM partitions WHERE state = 'claimed' AND lease_until_ms < {NOW_MS}
                                FOR UPDATE SKIP LOCKED)
                 RETURNING job_id, idx, state, error"
            ),
            &[&max_attempts],
        )?;
        let mut out = Expired::default();
        for row in rows {
            if row.get::<_, String>(2) == "failed" {
                out.failed += 1;
                let why = format!(
                    "partition {}: {} times: {}",
                    row.get::<_, i32>(1),
                    max_attempts,
                    row.get::<_, String>(3)
                );
                fail_job(&mut tx, &row.get::<_, String>(0), &why)?;
            } else {
                out.requeued += 1;
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Cancels a job that has not ended: its queued partitions are cancelled
    /// and claimed ones are fenced off (their workers stop at the next
    /// heartbeat). `false` if there is no such job.
    pub fn cancel(&mut self, id: JobId) -> Result<bool, QueueError> {
        let mut tx = self.client.transaction()?;
        let id = id.to_string();
        // Not locked here: `end_job` locks the partitions, then the job, and
        // does nothing to a job that has ended meanwhile.
        let exists = tx.query_opt("SELECT state FROM jobs WHERE id = $1", &[&id])?;
        let Some(row) = exists else { return Ok(false) };
        if matches!(row.get::<_, &str>(0), "queued" | "running") {
            end_job(&mut tx, &id, "cancelled", "cancelled by the client")?;
        }
        tx.commit()?;
        Ok(true)
    }

    /// Whether a job has ended (`None`: no such job): one row, for waiters
    /// that ask often.
    pub fn has_ended(&mut self, id: JobId) -> Result<Option<bool>, QueueError> {
        let row = self
            .client
            .query_opt("SELECT ended_ms IS NOT NULL FROM jobs WHERE id = $1", &[&id.to_string()])?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Which of `ids` have ended, for those still in the queue (one query
    /// for all of them).
    pub fn ended_among(&mut self, ids: &[JobId]) -> Result<HashMap<JobId, bool>, QueueError> {
        let text: Vec<String> = ids.iter().map(JobId::to_string).collect();
        let rows =
            self.client.query("SELECT id, ended_ms IS NOT NULL FROM jobs WHERE id = ANY($1)", &[&text])?;
        Ok(rows.iter().filter_map(|r| Some((r.get::<_, &str>(0).parse().ok()?, r.get(1)))).collect())
    }

    /// A job's state as the API shows it; `None` if there is no such job.
    pub fn status(&mut self, id: JobId) -> Result<Option<JobStatus>, QueueError> {
        let sid = id.to_string();
        let job = self.client.query_opt(
            &format!("SELECT circuit, state, error, ((coalesce(ended_ms, {NOW_MS}) - created_ms) / 1000.0)::float8, priority, door FROM jobs WHERE id = $1"),
            &[&sid],
        )?;
        let Some(job) = job else { return Ok(None) };
        let rows = self.client.query(
            "SELECT p.idx, p.state, p.error, p.attempt, f.proof, f.public_inputs
             FROM partitions p LEFT JOIN proofs f ON f.job_id = p.job_id AND f.idx = p.idx
             WHERE p.job_id = $1 ORDER BY p.idx",
            &[&sid],
        )?;
        let partitions = rows
            .iter()
            .map(|r| {
                let state: &str = r.get(1);
                let error: Option<String> = r.get(2);
                let stage = match state {
                    "queued" => Stage::Queued,
                    "claimed" => Stage::Claimed,
                    "succeeded" => Stage::Done,
                    "failed" => Stage::Failed,
                    _ => Stage::Cancelled,
                };
                // Earlier tries' reasons are kept in `faults` (the last one's).
                let retried = r.get::<_, i32>(3) > 1 || (stage == Stage::Queued && error.is_some());
                PartitionStatus {
                    stage,
                    // Which worker's device holds it is that worker's to know.
                    device: None,
                    faults: error.clone().filter(|_| retried).into_iter().collect(),
                    times: StageTimes::default(),
                    proof: r.get::<_, Option<Vec<u8>>>(4).and_then(|b| Proof::from_bytes(&b).ok()),
                    public_inputs: r
                        .get::<_, Option<String>>(5)
                        .map(|t| inputs_from_text(&t))
                        .unwrap_or_default(),
                    error: error.filter(|_| stage == Stage::Failed),
                }
            })
            .collect();
        let outcome = match job.get::<_, &str>(1) {
            "succeeded" => Some(Outcome::Succeeded),
            "failed" => Some(Outcome::Failed),
            "cancelled" => Some(Outcome::Cancelled),
            _ => None,
        };
        Ok(Some(JobStatus {
            id,
            circuit: job.get(0),
            priority: priority_of(job.get(4)),
            // A door this build does not know is shown as HTTP's.
            door: job.get::<_, &str>(5).parse().unwrap_or_default(),
            outcome,
            error: job.get(2),
            partitions,
            elapsed_seconds: job.get(3),
        }))
    }

    /// Queue length and the age of the oldest waiting partition.
    pub fn stats(&mut self) -> Result<QueueStats, QueueError> {
        let r = self.client.query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'claimed'),
                        coalesce(({NOW_MS} - min(queued_ms) FILTER (WHERE state = 'queued')) / 1000.0, 0)::float8,
                        count(*) FILTER (WHERE state = 'queued' AND priority = 0),
                        count(*) FILTER (WHERE state = 'queued' AND priority = 1),
                        count(*) FILTER (WHERE state = 'queued' AND priority = 2),
                        count(*) FILTER (WHERE state = 'queued' AND priority = 3)
                 FROM partitions WHERE state IN ('queued', 'claimed')"
            ),
            &[],
        )?;
        Ok(QueueStats {
            queued_partitions: r.get::<_, i64>(0) as u64,
            queued_by_priority: [3, 4, 5, 6].map(|i| r.get::<_, i64>(i) as u64),
            claimed_partitions: r.get::<_, i64>(1) as u64,
            oldest_queued_seconds: r.get(2),
        })
    }

    /// Drops jobs that ended more than `age_ms` ago (their partitions and
    /// proofs go with them).
    pub fn forget_ended(&mut self, age_ms: i64) -> Result<u64, QueueError> {
        Ok(self.client.execute(&format!("DELETE FROM jobs WHERE ended_ms < {NOW_MS} - $1"), &[&age_ms])?)
    }
}

fn set_partition(
    tx: &mut Transaction<'_>,
    job: &str,
    idx: i32,
    state: &str,
    error: Option<&String>,
) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE partitions SET state = $3, error = coalesce($4, error), worker = NULL, lease_until_ms = NULL
         WHERE job_id = $1 AND idx = $2",
        &[&job, &idx, &state, &error],
    )?;
    Ok(())
}

/// Ends a job failed, cancelling its partitions that have not ended.
fn fail_job(tx: &mut Transaction<'_>, job: &str, why: &str) -> Result<(), postgres::Error> {
    end_job(tx, job, "failed", why)
}

/// Ends a job not yet ended (`failed` or `cancelled`, saying why); its
/// partitions that have not ended are cancelled, which fences off their
/// claims (their workers stop them at the next heartbeat).
fn end_job(tx: &mut Transaction<'_>, job: &str, state: &str, why: &str) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE partitions SET state = 'cancelled', worker = NULL, lease_until_ms = NULL
         WHERE job_id = $1 AND state IN ('queued', 'claimed')",
        &[&job],
    )?;
    tx.execute(
        &format!(
            "UPDATE jobs SET state = $3, error = $2, ended_ms = {NOW_MS} WHERE id = $1 AND ended_ms IS NULL"
        ),
        &[&job, &why, &state],
    )?;
    Ok(())
}

/// Ids in the table are UUIDs (docs/operations.md tells SQL clients so).
fn parse_id(s: String) -> Result<JobId, QueueError> {
    s.parse().map_err(|_| QueueError::Corrupt(format!("job id '{s}' is not a UUID")))
}

/// A priority as the queue keeps it (its rank; the schema's CHECK holds it to 0..=3).
fn priority_of(rank: i16) -> Priority {
    Priority::ALL.get(rank as usize).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unreachable database's error says why (the driver's own text is
    /// only "error connecting to server"), and is retryable.
    #[test]
    fn a_database_error_says_why() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // The listener is dropped: nothing listens on the port.
        let Err(e) = Queue::connect(&format!("postgres://provd@127.0.0.1:{port}/postgres?connect_timeout=2"))
        else {
            panic!("connected to a closed port");
        };
        let said = e.to_string();
        assert!(said.starts_with("job queue database: error connecting to server: "), "{said}");
        assert!(said.to_lowercase().contains("refused"), "{said}");
        assert!(e.is_retryable());
    }

    /// A witness one PostgreSQL value cannot hold is refused before any
    /// statement, as the client's error (never "retry later").
    #[test]
    fn a_witness_past_one_value_is_refused_for_good() {
        assert!(within_a_value(0, MAX_WITNESS_BYTES).is_ok());
        let e = within_a_value(3, MAX_WITNESS_BYTES + 1).unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        let text = e.to_string();
        assert!(text.contains("partition 3") && text.contains("jobs.store = \"sqlite\""), "{text}");
    }
}
