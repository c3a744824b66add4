//! The job journal: every accepted job written down (with its witnesses)
//! before it is acknowledged, every partition's and job's end as it happens,
//! so that a restart loses no accepted job and serves finished proofs for as
//! long as they are kept. [`SqliteJournal`] keeps it in an SQLite file.
//!
//! The schema (TEXT ids, BIGINT milliseconds, BLOB payloads) is the one the
//! fleet's PostgreSQL queue extends (`migrations/postgres`: BYTEA payloads,
//! claims, attempts and a proofs table):
//!
//! - `jobs(id, circuit, state, error, created_ms, ended_ms, idempotency_key, request_digest, priority)`
//! - `partitions(job_id, idx, witness_json, witness_bin, witness_file, state, error, proof, public_inputs)`
//!
//! Binary witnesses over [`SPOOL_OVER`] bytes are not BLOBs but files beside
//! the database (`witness_file` names one): SQLite holds at most 10^9 bytes
//! in a value, and a large BLOB would be copied through its write-ahead log.

use std::path::Path;
use std::sync::Mutex;

use blstrs::Scalar;
use rusqlite::{params, Connection, OptionalExtension};

use crate::groth16::Proof;

pub use crate::pipeline::{now_ms, EndedJob, EndedPartition, JobId, JobObserver, ProvedPartition};
use crate::telemetry::labels::{Door, Outcome, Priority, Stage};

/// A partition's witness as the request gave it, kept to run it again.
#[derive(Clone, Debug, PartialEq)]
pub enum StoredWitness {
    Json(serde_json::Value),
    Binary(Vec<u8>),
}

/// What the journal keeps of an accepted job.
#[derive(Clone, Debug)]
pub struct AcceptedJob {
    pub id: JobId,
    pub circuit: String,
    pub priority: Priority,
    pub door: Door,
    pub witnesses: Vec<StoredWitness>,
    /// The client's idempotency key and its request's digest.
    pub idempotency: Option<(String, [u8; 32])>,
}

/// A job that ended before the restart, as the journal kept it.
#[derive(Clone, Debug)]
pub struct EndedRecord {
    pub job: EndedJob,
    /// The client's idempotency key and its request's digest.
    pub idempotency: Option<(String, [u8; 32])>,
}

/// A job accepted and not ended before a restart.
#[derive(Clone, Debug)]
pub struct UnfinishedJob {
    pub id: JobId,
    pub circuit: String,
    pub priority: Priority,
    pub door: Door,
    /// One per partition.
    pub witnesses: Vec<RecoveredWitness>,
    pub idempotency: Option<(String, [u8; 32])>,
    /// Its partitions that had ended with a proof.
    pub proved: Vec<ProvedPartition>,
}

/// A partition's witness as a restart finds it. JSON ones are read at open
/// (a request body's worth at most); binary ones, which can be gigabytes,
/// stay where they are until [`Journal::read_witness`], called once their
/// job holds the memory for them, so that opening a journal of many
/// unfinished jobs reads none of their bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum RecoveredWitness {
    Json(serde_json::Value),
    Binary(OnDisk),
}

/// Where the journal keeps a binary witness.
#[derive(Clone, Debug, PartialEq)]
pub enum OnDisk {
    /// A BLOB in the partition's row.
    Row { job: JobId, index: usize },
    /// A file in the spool beside the database.
    File(std::path::PathBuf),
}

/// Binary witnesses larger than this are written to files, not BLOBs.
pub const SPOOL_OVER: usize = 64 << 20;

/// What the journal held when it was opened.
#[derive(Debug, Default)]
pub struct Recovered {
    pub ended: Vec<EndedRecord>,
    /// Accepted and not ended: to run again (or fail, by config).
    pub unfinished: Vec<UnfinishedJob>,
}

/// Why the journal could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("job journal {path}: {source}")]
pub struct JournalError {
    path: String,
    #[source]
    source: JournalFault,
}

/// What failed: the database, or a witness file beside it.
#[derive(Debug, thiserror::Error)]
pub enum JournalFault {
    #[error(transparent)]
    Database(#[from] rusqlite::Error),
    #[error("a witness file: {0}")]
    WitnessFile(#[from] std::io::Error),
    #[error("job {job} has no binary witness for partition {index}")]
    NoWitness { job: JobId, index: usize },
    #[error(transparent)]
    Locked(#[from] crate::LockError),
}

/// Durable record of jobs. It observes the engine's partition and job ends;
/// writes of ends are best effort (logged when they fail): the job's own
/// state in memory is what clients see while it lives.
pub trait Journal: JobObserver {
    /// Records an accepted job, durably, before it is acknowledged. A job
    /// already recorded (run again after a restart) is marked queued, and so
    /// are its partitions but those that ended with a proof, which keep it.
    fn accepted(&self, job: &AcceptedJob) -> Result<(), JournalError>;
    /// Records a client's cancel of a job that has not ended, durably,
    /// before the cancel is acknowledged: the job and its partitions not yet
    /// ended are marked cancelled, so that a restart serves it cancelled
    /// instead of running it again. (Partitions that end after it, and the
    /// job's end, are observed as usual.) Whether the job had not ended.
    fn cancelled(&self, id: JobId) -> Result<bool, JournalError>;
    /// Drops jobs that ended more than `age_ms` ago.
    fn forget_ended(&self, age_ms: u64);
    /// Writes again, in order, the ends that could not be written when they
    /// happened (a full disk, say).
    fn flush(&self);
    /// Why ends are waiting to be written, while any are: the worker must
    /// not take work it could not record the end of.
    fn behind(&self) -> Option<String>;
    /// The bytes of a binary witness that [`SqliteJournal::open`] left on disk.
    fn read_witness(&self, at: &OnDisk) -> Result<Vec<u8>, JournalError>;
}

/// Public inputs as the stores keep them: a JSON list of "0x…" strings.
pub fn inputs_to_text(inputs: &[Scalar]) -> String {
    serde_json::to_string(&inputs.iter().map(crate::groth16::format_scalar).collect::<Vec<_>>())
        .expect("strings encode")
}

/// The inverse of [`inputs_to_text`]; what does not parse is dropped (the
/// proof's check against them then fails loudly).
pub fn inputs_from_text(text: &str) -> Vec<Scalar> {
    serde_json::from_str::<Vec<String>>(text)
        .map(|v| v.iter().filter_map(|s| crate::groth16::parse_scalar(s).ok()).collect())
        .unwrap_or_default()
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    circuit TEXT NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    created_ms BIGINT NOT NULL,
    ended_ms BIGINT,
    idempotency_key TEXT UNIQUE,
    request_digest BLOB,
    priority TEXT NOT NULL DEFAULT 'normal',
    door TEXT NOT NULL DEFAULT 'http'
);
CREATE TABLE IF NOT EXISTS partitions (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    witness_json TEXT,
    witness_bin BLOB,
    state TEXT NOT NULL,
    error TEXT,
    proof BLOB,
    public_inputs TEXT,
    witness_file TEXT,
    PRIMARY KEY (job_id, idx)
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state);
";

/// The journal in an SQLite file (WAL; accepted jobs fsynced before they are
/// acknowledged, ends written without waiting for the disk).
pub struct SqliteJournal {
    conn: Mutex<Connection>,
    path: String,
    /// Where witnesses over `spool_over` bytes go: `<database>.witnesses/`.
    spool: std::path::PathBuf,
    spool_over: usize,
    /// One process at a time: two running the same jobs after a crash
    /// would prove them twice and serve two proofs for one id.
    _lock: crate::Exclusive,
    /// Ends not written yet, oldest first, and why the last try failed.
    unwritten: Mutex<(std::collections::VecDeque<Unwritten>, String)>,
    /// Makes every write of an end fail, as a full disk would (tests).
    #[cfg(test)]
    disk_full: std::sync::atomic::AtomicBool,
}

/// An end the journal could not write when it happened, kept to be written
/// again in order.
#[derive(Debug)]
enum Unwritten {
    Partition { job: JobId, index: usize, end: Box<EndedPartition> },
    Job { job: JobId, outcome: Outcome, error: Option<String>, ended_ms: u64 },
}

impl SqliteJournal {
    /// Opens (or creates) the journal and reads what it holds; refused
    /// while another process has it open.
    pub fn open(path: &Path) -> Result<(Self, Recovered), JournalError> {
        let shown = path.display().to_string();
        let lock = crate::Exclusive::take(&path.with_extension("lock"), path)
            .map_err(|e| JournalError { path: shown.clone(), source: e.into() })?;
        let fail = |e: rusqlite::Error| JournalError { path: shown.clone(), source: e.into() };
        let conn = Connection::open(path).map_err(fail)?;
        // WAL with `synchronous = NORMAL`: a commit survives the process's
        // crash (kill -9) without an fsync of its own; `accepted` raises it to
        // FULL for its commit, so an acknowledged job also survives a power
        // loss (and the fsync carries the ends written before it).
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
        )
        .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        // Journals written before witness files and priorities existed lack
        // their columns (a job of such a journal was normal).
        add_missing_column(&conn, "partitions", "witness_file", "TEXT").map_err(fail)?;
        add_missing_column(&conn, "jobs", "priority", "TEXT NOT NULL DEFAULT 'normal'").map_err(fail)?;
        add_missing_column(&conn, "jobs", "door", "TEXT NOT NULL DEFAULT 'http'").map_err(fail)?;
        let spool = path.with_extension("witnesses");
        let journal = Self {
            conn: Mutex::new(conn),
            path: shown,
            spool,
            spool_over: SPOOL_OVER,
            _lock: lock,
            unwritten: Mutex::default(),
            #[cfg(test)]
            disk_full: Default::default(),
        };
        let recovered =
            journal.recover().map_err(|e| JournalError { path: journal.path.clone(), source: e.into() })?;
        journal.sweep_spool();
        Ok((journal, recovered))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spools witnesses over `bytes` instead of [`SPOOL_OVER`] (tests).
    #[cfg(test)]
    fn spooling_over(mut self, bytes: usize) -> Self {
        self.spool_over = bytes;
        self
    }

    /// Writes a witness file durably (a temporary file, synced, renamed,
    /// and the directory synced) and returns its name in the spool.
    fn spool_witness(&self, id: JobId, index: usize, bytes: &[u8]) -> std::io::Result<String> {
        use std::io::Write;
        std::fs::create_dir_all(&self.spool)?;
        let name = format!("{id}-{index}.bin");
        let tmp = self.spool.join(format!("{name}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.spool.join(&name))?;
        std::fs::File::open(&self.spool)?.sync_all()?;
        Ok(name)
    }

    /// Deletes spooled files no row names: those of a crash between a
    /// file's write and its row's commit, or between a job's end and the
    /// file's deletion (and temporary files of a write cut short).
    fn sweep_spool(&self) {
        let Ok(entries) = std::fs::read_dir(&self.spool) else { return };
        let named: std::collections::HashSet<String> = {
            let conn = self.lock();
            let names = conn
                .prepare("SELECT witness_file FROM partitions WHERE witness_file IS NOT NULL")
                .and_then(|mut q| q.query_map([], |r| r.get::<_, String>(0))?.collect());
            match names {
                Ok(names) => names,
                Err(e) => return self.log_failure("a sweep of the witness files", e),
            }
        };
        let orphans = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| !named.contains(name))
            .collect();
        self.unspool(orphans);
    }

    /// Deletes the witness files `names` (of a job that ended, or orphans).
    fn unspool(&self, names: Vec<String>) {
        for name in names {
            if let Err(e) = std::fs::remove_file(self.spool.join(&name)) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(journal = %self.path, file = %name, "could not delete a spooled witness: {e}");
                }
            }
        }
    }

    fn recover(&self) -> rusqlite::Result<Recovered> {
        let conn = self.lock();
        let mut jobs = conn.prepare(
            "SELECT id, circuit, state, error, created_ms, ended_ms, idempotency_key, request_digest, priority, door FROM jobs ORDER BY created_ms",
        )?;
        let rows = jobs.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<i64>>(5)?,
                r.get::<_, Option<String>>(6)?,
                r.get::<_, Option<Vec<u8>>>(7)?,
                // A class this build does not know is served as normal.
                r.get::<_, String>(8)?.parse::<Priority>().unwrap_or_default(),
                r.get::<_, String>(9)?.parse::<Door>().unwrap_or_default(),
            ))
        })?;
        let mut out = Recovered::default();
        // A BLOB's presence, not its bytes: those are read when the job runs.
        let mut parts = conn.prepare(
            "SELECT witness_json, witness_bin IS NOT NULL, state, error, proof, public_inputs, witness_file, idx FROM partitions WHERE job_id = ?1 ORDER BY idx",
        )?;
        for row in rows {
            let (id, circuit, state, error, created_ms, ended_ms, key, digest, priority, door) = row?;
            let Ok(job_id) = id.parse::<JobId>() else { continue };
            let idempotency = key.zip(digest.and_then(|d| <[u8; 32]>::try_from(d).ok()));
            let partitions: Vec<(RecoveredWitness, EndedPartition)> = parts
                .query_map(params![id], |r| {
                    let file = r.get::<_, Option<String>>(6)?;
                    let index = r.get::<_, i64>(7)? as usize;
                    let witness = match (r.get::<_, Option<String>>(0)?, r.get::<_, bool>(1)?, file) {
                        (Some(json), _, _) => {
                            RecoveredWitness::Json(serde_json::from_str(&json).unwrap_or_default())
                        }
                        (None, true, _) => RecoveredWitness::Binary(OnDisk::Row { job: job_id, index }),
                        // A file of the spool, named by the journal: a bare name
                        // (a path or ".." is not one of its files).
                        (None, false, Some(name)) if is_spool_name(&name) => {
                            RecoveredWitness::Binary(OnDisk::File(self.spool.join(name)))
                        }
                        // None kept (or a name that is no spool file's): the
                        // job fails when it is decoded, saying so.
                        (None, false, _) => RecoveredWitness::Json(serde_json::Value::Null),
                    };
                    let stage = stage_from(&r.get::<_, String>(2)?);
                    let proof = r.get::<_, Option<Vec<u8>>>(4)?.and_then(|b| Proof::from_bytes(&b).ok());
                    let public_inputs =
                        r.get::<_, Option<String>>(5)?.map(|t| inputs_from_text(&t)).unwrap_or_default();
                    Ok((witness, EndedPartition { stage, proof, public_inputs, error: r.get(3)? }))
                })?
                .collect::<rusqlite::Result<_>>()?;
            match outcome_from(&state) {
                Some(outcome) => out.ended.push(EndedRecord {
                    job: EndedJob {
                        id: job_id,
                        circuit,
                        priority,
                        door,
                        outcome,
                        error,
                        created_ms: created_ms as u64,
                        ended_ms: ended_ms.unwrap_or(created_ms) as u64,
                        partitions: partitions.into_iter().map(|(_, p)| p).collect(),
                    },
                    idempotency,
                }),
                None => {
                    let proved = partitions
                        .iter()
                        .enumerate()
                        .filter_map(|(index, (_, p))| match (p.stage, p.proof) {
                            (Stage::Done, Some(proof)) => {
                                Some(ProvedPartition { index, proof, public_inputs: p.public_inputs.clone() })
                            }
                            _ => None,
                        })
                        .collect();
                    let witnesses = partitions.into_iter().map(|(w, _)| w).collect();
                    out.unfinished.push(UnfinishedJob {
                        id: job_id,
                        circuit,
                        priority,
                        door,
                        witnesses,
                        idempotency,
                        proved,
                    })
                }
            }
        }
        Ok(out)
    }

    fn log_failure(&self, what: &str, e: rusqlite::Error) {
        tracing::error!(journal = %self.path, "could not record {what}: {e}");
    }
}

/// Adds `column` to `table` unless the table has it.
fn add_missing_column(conn: &Connection, table: &str, column: &str, declared: &str) -> rusqlite::Result<()> {
    let has = conn
        .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")
        .and_then(|mut q| q.exists(params![table, column]))?;
    if !has {
        conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {declared}"))?;
    }
    Ok(())
}

/// Runs `write` in one transaction committed with `synchronous = FULL`
/// (fsynced: it survives a power loss, and carries the ends written before
/// it), then back to `NORMAL` whatever `write` did, so that a write that
/// returned early or failed leaves no later write paying for an fsync.
fn durably<T>(
    conn: &mut Connection,
    write: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.execute_batch("PRAGMA synchronous = FULL")?;
    let written = conn.transaction().and_then(|tx| {
        let out = write(&tx)?;
        tx.commit()?;
        Ok(out)
    });
    let normal = conn.execute_batch("PRAGMA synchronous = NORMAL");
    let out = written?;
    normal?;
    Ok(out)
}

/// Whether a witness file's name, as a row gives it, names a file inside
/// the spool (the journal writes `<job>-<index>.bin`).
fn is_spool_name(name: &str) -> bool {
    // `file_name` is None for ".." and "." and drops any directory part.
    let path = Path::new(name);
    path.file_name().is_some_and(|f| f == path.as_os_str())
}

/// Drops an ended job's witnesses: it is never run again.
fn drop_witnesses(conn: &Connection, id: JobId) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE partitions SET witness_json = NULL, witness_bin = NULL, witness_file = NULL WHERE job_id = ?1",
        params![id.to_string()],
    )?;
    Ok(())
}

/// The spooled witness files of one job's partitions.
fn spooled_files(conn: &Connection, id: JobId) -> rusqlite::Result<Vec<String>> {
    let mut q =
        conn.prepare("SELECT witness_file FROM partitions WHERE witness_file IS NOT NULL AND job_id = ?1")?;
    let names = q.query_map(params![id.to_string()], |r| r.get::<_, String>(0))?.collect();
    names
}

fn stage_from(s: &str) -> Stage {
    match s {
        "done" => Stage::Done,
        "failed" => Stage::Failed,
        "cancelled" => Stage::Cancelled,
        _ => Stage::Queued,
    }
}

fn outcome_from(s: &str) -> Option<Outcome> {
    match s {
        "succeeded" => Some(Outcome::Succeeded),
        "failed" => Some(Outcome::Failed),
        "cancelled" => Some(Outcome::Cancelled),
        _ => None,
    }
}

impl Journal for SqliteJournal {
    fn accepted(&self, job: &AcceptedJob) -> Result<(), JournalError> {
        // Large binary witnesses of a new job go to files first, durably, so
        // that the row that names them is never committed without them (a
        // job run again after a restart has its files already).
        let known = self
            .lock()
            .query_row("SELECT 1 FROM jobs WHERE id = ?1", params![job.id.to_string()], |_| Ok(()))
            .optional()
            .map_err(|e| JournalError { path: self.path.clone(), source: e.into() })?
            .is_some();
        let mut files = Vec::with_capacity(job.witnesses.len());
        for (i, w) in job.witnesses.iter().enumerate().filter(|_| !known) {
            files.push(match w {
                StoredWitness::Binary(b) if b.len() > self.spool_over => Some(
                    self.spool_witness(job.id, i, b)
                        .map_err(|e| JournalError { path: self.path.clone(), source: e.into() })?,
                ),
                _ => None,
            });
        }
        let written = durably(&mut self.lock(), |tx| {
            let id = job.id.to_string();
            let exists: Option<i64> =
                tx.query_row("SELECT 1 FROM jobs WHERE id = ?1", params![id], |r| r.get(0)).optional()?;
            if exists.is_some() {
                tx.execute("UPDATE jobs SET state = 'queued' WHERE id = ?1", params![id])?;
                tx.execute(
                    "UPDATE partitions SET state = 'queued', error = NULL, proof = NULL, public_inputs = NULL WHERE job_id = ?1 AND state != 'done'",
                    params![id],
                )?;
            } else {
                let (key, digest) = match &job.idempotency {
                    Some((k, d)) => (Some(k.as_str()), Some(d.to_vec())),
                    None => (None, None),
                };
                // A key moves to the new job when its earlier one failed or
                // was cancelled (the service decided so before it came here).
                tx.execute(
                    "UPDATE jobs SET idempotency_key = NULL WHERE idempotency_key = ?1",
                    params![key],
                )?;
                tx.execute(
                    "INSERT INTO jobs (id, circuit, state, created_ms, idempotency_key, request_digest, priority, door) \
                     VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7)",
                    params![id, job.circuit, now_ms() as i64, key, digest, job.priority.name(), job.door.name()],
                )?;
                let mut insert = tx.prepare(
                    "INSERT INTO partitions (job_id, idx, witness_json, witness_bin, witness_file, state) VALUES (?1, ?2, ?3, ?4, ?5, 'queued')",
                )?;
                for (i, (w, file)) in job.witnesses.iter().zip(&files).enumerate() {
                    let (json, bin) = match (w, file) {
                        (StoredWitness::Json(v), _) => (Some(v.to_string()), None),
                        (StoredWitness::Binary(_), Some(_)) => (None, None),
                        (StoredWitness::Binary(b), None) => (None, Some(b.as_slice())),
                    };
                    insert.execute(params![id, i as i64, json, bin, file])?;
                }
            }
            Ok(())
        });
        if written.is_err() {
            self.unspool(files.into_iter().flatten().collect());
        }
        written.map_err(|e| JournalError { path: self.path.clone(), source: e.into() })
    }

    fn cancelled(&self, id: JobId) -> Result<bool, JournalError> {
        let written = durably(&mut self.lock(), |tx| {
            let ended = tx.execute(
                "UPDATE jobs SET state = 'cancelled', error = 'cancelled by a client', ended_ms = ?2 \
                 WHERE id = ?1 AND ended_ms IS NULL",
                params![id.to_string(), now_ms() as i64],
            )?;
            if ended == 0 {
                return Ok((false, Vec::new()));
            }
            let files = spooled_files(tx, id)?;
            tx.execute(
                "UPDATE partitions SET state = 'cancelled' WHERE job_id = ?1 AND state NOT IN ('done', 'failed')",
                params![id.to_string()],
            )?;
            drop_witnesses(tx, id)?;
            Ok((true, files))
        });
        let (cancelled, files) =
            written.map_err(|e| JournalError { path: self.path.clone(), source: e.into() })?;
        self.unspool(files);
        Ok(cancelled)
    }

    fn flush(&self) {
        let mut unwritten = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
        self.write_unwritten(&mut unwritten);
    }

    fn behind(&self) -> Option<String> {
        let unwritten = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
        (!unwritten.0.is_empty()).then(|| {
            format!(
                "the job journal {} cannot record {} job and partition ends ({}); no new work until it can",
                self.path,
                unwritten.0.len(),
                unwritten.1
            )
        })
    }

    fn forget_ended(&self, age_ms: u64) {
        let cutoff = now_ms().saturating_sub(age_ms) as i64;
        // (An ended job's witness files went with its end: job_ended.)
        let r = self
            .lock()
            .execute("DELETE FROM jobs WHERE ended_ms IS NOT NULL AND ended_ms < ?1", params![cutoff]);
        if let Err(e) = r {
            self.log_failure("the expiry of ended jobs", e);
        }
    }

    fn read_witness(&self, at: &OnDisk) -> Result<Vec<u8>, JournalError> {
        let fail = |source: JournalFault| JournalError { path: self.path.clone(), source };
        match at {
            OnDisk::File(path) => std::fs::read(path).map_err(|e| {
                fail(std::io::Error::new(e.kind(), format!("reading {}: {e}", path.display())).into())
            }),
            OnDisk::Row { job, index } => self
                .lock()
                .query_row(
                    "SELECT witness_bin FROM partitions WHERE job_id = ?1 AND idx = ?2",
                    params![job.to_string(), *index as i64],
                    |r| r.get::<_, Option<Vec<u8>>>(0),
                )
                .optional()
                .map_err(|e| fail(e.into()))?
                .flatten()
                .ok_or_else(|| fail(JournalFault::NoWitness { job: *job, index: *index })),
        }
    }
}

impl SqliteJournal {
    fn write_partition_end(&self, id: JobId, index: usize, ended: &EndedPartition) -> rusqlite::Result<()> {
        self.fail_if_disk_full()?;
        let state = match ended.stage {
            Stage::Done => "done",
            Stage::Failed => "failed",
            _ => "cancelled",
        };
        let proof = ended.proof.map(|p| p.to_bytes().to_vec());
        let public = (!ended.public_inputs.is_empty()).then(|| inputs_to_text(&ended.public_inputs));
        self.lock().execute(
            "UPDATE partitions SET state = ?3, error = ?4, proof = ?5, public_inputs = ?6 WHERE job_id = ?1 AND idx = ?2",
            params![id.to_string(), index as i64, state, ended.error, proof, public],
        )?;
        Ok(())
    }

    fn write_job_end(
        &self,
        id: JobId,
        outcome: Outcome,
        error: Option<&str>,
        ended_ms: u64,
    ) -> rusqlite::Result<()> {
        self.fail_if_disk_full()?;
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let files = spooled_files(&tx, id)?;
        tx.execute(
            "UPDATE jobs SET state = ?2, error = ?3, ended_ms = ?4 WHERE id = ?1",
            params![id.to_string(), outcome.name(), error, ended_ms as i64],
        )?;
        drop_witnesses(&tx, id)?;
        tx.commit()?;
        drop(conn);
        self.unspool(files);
        Ok(())
    }

    fn write(&self, end: &Unwritten) -> rusqlite::Result<()> {
        match end {
            Unwritten::Partition { job, index, end } => self.write_partition_end(*job, *index, end),
            Unwritten::Job { job, outcome, error, ended_ms } => {
                self.write_job_end(*job, *outcome, error.as_deref(), *ended_ms)
            }
        }
    }

    /// Writes `end` now, after any left unwritten before it; what cannot be
    /// written waits, in order, for [`Journal::flush`].
    fn record(&self, end: Unwritten) {
        let mut unwritten = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
        unwritten.0.push_back(end);
        self.write_unwritten(&mut unwritten);
    }

    /// Writes the ends waiting, oldest first, up to the first that fails.
    fn write_unwritten(&self, unwritten: &mut (std::collections::VecDeque<Unwritten>, String)) {
        while let Some(next) = unwritten.0.front() {
            match self.write(next) {
                Ok(()) => {
                    unwritten.0.pop_front();
                }
                Err(e) => {
                    if unwritten.1.is_empty() {
                        tracing::error!(journal = %self.path, waiting = unwritten.0.len(),
                            "could not record a job's or partition's end ({e}); kept to write again, and the worker is unready until it can");
                    }
                    unwritten.1 = e.to_string();
                    return;
                }
            }
        }
        if !unwritten.1.is_empty() {
            tracing::info!(journal = %self.path, "the ends kept back are written; ready again");
            unwritten.1.clear();
        }
    }

    #[cfg(test)]
    fn fail_if_disk_full(&self) -> rusqlite::Result<()> {
        match self.disk_full.load(std::sync::atomic::Ordering::Acquire) {
            true => Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full (test)".into()),
            )),
            false => Ok(()),
        }
    }

    #[cfg(not(test))]
    fn fail_if_disk_full(&self) -> rusqlite::Result<()> {
        Ok(())
    }
}

impl JobObserver for SqliteJournal {
    fn partition_ended(&self, job: JobId, index: usize, end: &EndedPartition) {
        self.record(Unwritten::Partition { job, index, end: Box::new(end.clone()) });
    }

    fn job_ended(&self, job: JobId, outcome: Outcome, error: Option<&str>) {
        self.record(Unwritten::Job { job, outcome, error: error.map(String::from), ended_ms: now_ms() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_name_is_a_spool_file() {
        assert!(is_spool_name("0190f5c2-7a6e-7000-8000-000000000000-3.bin"));
        for other in ["..", ".", "/etc/passwd", "../jobs.sqlite", "a/b.bin", ""] {
            assert!(!is_spool_name(other), "{other:?}");
        }
    }

    #[test]
    fn what_was_written_is_recovered_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (journal, recovered) = SqliteJournal::open(&path).unwrap();
        assert!(recovered.ended.is_empty() && recovered.unfinished.is_empty());
        let (a, b) = (JobId::new(), JobId::new());
        let witnesses =
            vec![StoredWitness::Json(serde_json::json!({"seed": 1})), StoredWitness::Binary(vec![1, 2, 3])];
        journal
            .accepted(&AcceptedJob {
                id: a,
                circuit: "c".into(),
                priority: Priority::Critical,
                door: Door::Grpc,
                witnesses: witnesses.clone(),
                idempotency: None,
            })
            .unwrap();
        let key = Some(("k".to_string(), [7u8; 32]));
        journal
            .accepted(&AcceptedJob {
                id: b,
                circuit: "c".into(),
                priority: Priority::Low,
                door: Door::Http,
                witnesses: vec![],
                idempotency: key.clone(),
            })
            .unwrap();
        journal.job_ended(b, Outcome::Failed, Some("why"));
        drop(journal);

        let (journal, recovered) = SqliteJournal::open(&path).unwrap();
        assert_eq!(recovered.unfinished.len(), 1);
        let unfinished = &recovered.unfinished[0];
        // the binary witness is left in its row until the job runs
        let binary = OnDisk::Row { job: a, index: 1 };
        let expected = [
            RecoveredWitness::Json(serde_json::json!({"seed": 1})),
            RecoveredWitness::Binary(binary.clone()),
        ];
        assert_eq!((unfinished.id, &unfinished.witnesses[..]), (a, &expected[..]));
        assert_eq!(
            (unfinished.priority, unfinished.door),
            (Priority::Critical, Door::Grpc),
            "kept as it came"
        );
        assert_eq!(journal.read_witness(&binary).unwrap(), [1, 2, 3]);
        let none = journal.read_witness(&OnDisk::Row { job: a, index: 0 }).unwrap_err();
        assert!(matches!(none.source, JournalFault::NoWitness { index: 0, .. }), "{none}");
        assert!(unfinished.proved.is_empty());
        let ended = &recovered.ended[0];
        assert_eq!(
            (
                ended.job.id,
                ended.job.outcome,
                ended.job.error.as_deref(),
                &ended.idempotency,
                ended.job.priority,
                ended.job.door
            ),
            (b, Outcome::Failed, Some("why"), &key, Priority::Low, Door::Http)
        );
        // Running again marks the job queued and keeps its witnesses.
        journal.accepted(&accepted(a, vec![])).unwrap();
        let proof = Proof::from_bytes(&[0u8; 192]).ok();
        journal.partition_ended(
            a,
            0,
            &EndedPartition { stage: Stage::Failed, proof, public_inputs: vec![], error: Some("e".into()) },
        );
        journal.job_ended(a, Outcome::Failed, Some("partition 0: e"));
        journal.forget_ended(60_000);
        drop(journal);
        let (journal, recovered) = SqliteJournal::open(&path).unwrap();
        assert_eq!((recovered.unfinished.len(), recovered.ended.len()), (0, 2));
        let a_ended = recovered.ended.iter().find(|j| j.job.id == a).unwrap();
        assert_eq!(a_ended.job.partitions[0].error.as_deref(), Some("e"));
        std::thread::sleep(std::time::Duration::from_millis(5));
        journal.forget_ended(1);
        drop(journal);
        let (_, recovered) = SqliteJournal::open(&path).unwrap();
        assert!(recovered.ended.is_empty(), "expired jobs are deleted");
    }

    /// A retry after its job failed is a new job that takes the key over
    /// (the service decides that; the journal must not refuse it).
    #[test]
    fn a_key_moves_to_the_job_that_retries_a_failed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (journal, _) = SqliteJournal::open(&path).unwrap();
        let keyed =
            |id| AcceptedJob { idempotency: Some(("k".to_string(), [7u8; 32])), ..accepted(id, vec![]) };
        let (first, retry) = (JobId::new(), JobId::new());
        journal.accepted(&keyed(first)).unwrap();
        journal.job_ended(first, Outcome::Failed, Some("device fault"));
        journal.flush();
        journal.accepted(&keyed(retry)).unwrap();
        drop(journal);
        let (_, recovered) = SqliteJournal::open(&path).unwrap();
        let holder = |id| recovered.ended.iter().map(|e| (e.job.id, &e.idempotency)).find(|(j, _)| *j == id);
        assert_eq!(holder(first).map(|(_, k)| k.is_none()), Some(true), "the failed job gave its key up");
        let retried = recovered.unfinished.iter().find(|u| u.id == retry).unwrap();
        assert_eq!(retried.idempotency.as_ref().map(|(k, _)| k.as_str()), Some("k"));
    }

    /// A normal job of circuit "c", without an idempotency key.
    fn accepted(id: JobId, witnesses: Vec<StoredWitness>) -> AcceptedJob {
        AcceptedJob {
            id,
            circuit: "c".into(),
            priority: Priority::Normal,
            door: Door::Http,
            witnesses,
            idempotency: None,
        }
    }

    /// The job as a restart records it again (known to the journal, which
    /// keeps its witnesses as they are).
    fn again(u: &UnfinishedJob) -> AcceptedJob {
        AcceptedJob {
            id: u.id,
            circuit: u.circuit.clone(),
            priority: u.priority,
            door: u.door,
            witnesses: vec![],
            idempotency: u.idempotency.clone(),
        }
    }

    /// A partition that ended with a proof before the restart keeps it, its
    /// job is unfinished with that partition proved, and running the job
    /// again resets only the others.
    #[test]
    fn proved_partitions_of_an_unfinished_job_survive_its_rerun() {
        use group::prime::PrimeCurveAffine;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (journal, _) = SqliteJournal::open(&path).unwrap();
        let id = JobId::new();
        let witnesses = (0..3).map(|i| StoredWitness::Json(serde_json::json!({ "seed": i }))).collect();
        let job = accepted(id, witnesses);
        journal.accepted(&job).unwrap();
        let proof = Proof {
            a: blstrs::G1Affine::generator(),
            b: blstrs::G2Affine::generator(),
            c: blstrs::G1Affine::identity(),
        };
        let public_inputs = vec![Scalar::from(5u64)];
        let done = EndedPartition { stage: Stage::Done, proof: Some(proof), public_inputs, error: None };
        journal.partition_ended(id, 1, &done);
        drop(journal);
        let expected = vec![ProvedPartition { index: 1, proof, public_inputs: vec![Scalar::from(5u64)] }];
        for _ in 0..2 {
            let (journal, recovered) = SqliteJournal::open(&path).unwrap();
            let [unfinished] = &recovered.unfinished[..] else { panic!("{recovered:?}") };
            assert_eq!(unfinished.proved, expected);
            assert_eq!(unfinished.witnesses.len(), 3);
            // as a restart does: the job recorded again, to run its other partitions
            journal.accepted(&again(unfinished)).unwrap();
        }
    }

    /// Binary witnesses over the threshold live in files beside the
    /// database: named after a restart and read only when asked, deleted
    /// when their job ends; a file gone missing is an error naming it, never
    /// an empty witness. Small ones stay BLOBs.
    #[test]
    fn large_binary_witnesses_are_spooled_to_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let spool = dir.path().join("jobs.witnesses");
        let open = || {
            let (j, r) = SqliteJournal::open(&path).unwrap();
            (j.spooling_over(100), r)
        };
        let (journal, _) = open();
        let (big, small) = (vec![7u8; 1000], vec![1u8; 10]);
        let (a, b) = (JobId::new(), JobId::new());
        for (id, bytes) in [(a, &big), (b, &small)] {
            let witnesses = vec![StoredWitness::Binary(bytes.clone())];
            journal.accepted(&accepted(id, witnesses)).unwrap();
        }
        let files: Vec<_> = std::fs::read_dir(&spool).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files, [std::ffi::OsString::from(format!("{a}-0.bin"))], "only the large one is a file");
        drop(journal);

        let (journal, recovered) = open();
        let witness_of = |id| {
            let u = recovered.unfinished.iter().find(|u| u.id == id).unwrap();
            let [RecoveredWitness::Binary(at)] = &u.witnesses[..] else { panic!("{u:?}") };
            at.clone()
        };
        assert_eq!(witness_of(a), OnDisk::File(spool.join(format!("{a}-0.bin"))));
        assert_eq!(journal.read_witness(&witness_of(a)).unwrap(), big);
        assert_eq!(witness_of(b), OnDisk::Row { job: b, index: 0 });
        assert_eq!(journal.read_witness(&witness_of(b)).unwrap(), small);
        // run again after the restart: recorded again, its file kept as it is
        journal.accepted(&again(recovered.unfinished.iter().find(|u| u.id == a).unwrap())).unwrap();
        assert_eq!(std::fs::read(spool.join(format!("{a}-0.bin"))).unwrap(), vec![7u8; 1000]);
        journal.job_ended(a, Outcome::Succeeded, None);
        assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0, "an ended job's file is deleted");

        let c = JobId::new();
        let witnesses = vec![StoredWitness::Binary(vec![3u8; 500])];
        journal.accepted(&accepted(c, witnesses)).unwrap();
        drop(journal);
        std::fs::remove_file(spool.join(format!("{c}-0.bin"))).unwrap();
        // a file no row names (a crash between its write and its row) goes at open
        std::fs::write(spool.join("orphan.bin.tmp"), b"x").unwrap();
        let (journal, recovered) = open();
        assert!(!spool.join("orphan.bin.tmp").exists(), "an orphaned witness file is swept at open");
        let gone = recovered.unfinished.iter().find(|u| u.id == c).unwrap();
        let [RecoveredWitness::Binary(at)] = &gone.witnesses[..] else { panic!("{gone:?}") };
        let e = journal.read_witness(at).unwrap_err();
        assert!(matches!(e.source, JournalFault::WitnessFile(_)), "{e}");
        assert!(e.to_string().contains(&format!("{c}-0.bin")), "the error names the file: {e}");
    }

    /// A cancel is recorded as the job's end at once; partitions that had
    /// ended keep their end, the others are cancelled, and a job that had
    /// ended is left as it was.
    #[test]
    fn a_cancel_is_recorded_before_the_partitions_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (journal, _) = SqliteJournal::open(&path).unwrap();
        let (id, done) = (JobId::new(), JobId::new());
        let two =
            || vec![StoredWitness::Json(serde_json::json!(1)), StoredWitness::Json(serde_json::json!(2))];
        for job in [id, done] {
            journal.accepted(&accepted(job, two())).unwrap();
        }
        let proof = Proof::from_bytes(&[0u8; 192]).ok();
        let ended = EndedPartition { stage: Stage::Done, proof, public_inputs: vec![], error: None };
        journal.partition_ended(id, 0, &ended);
        journal.job_ended(done, Outcome::Succeeded, None);
        assert!(journal.cancelled(id).unwrap());
        assert!(!journal.cancelled(done).unwrap(), "an ended job is not cancelled");
        let synchronous: i64 = journal.lock().query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(synchronous, 1, "NORMAL again after a durable write that changed nothing");
        assert!(!journal.cancelled(JobId::new()).unwrap(), "nor an unknown one");
        drop(journal);
        let (_, recovered) = SqliteJournal::open(&path).unwrap();
        assert!(recovered.unfinished.is_empty(), "{:?}", recovered.unfinished);
        let job = &recovered.ended.iter().find(|e| e.job.id == id).unwrap().job;
        assert_eq!(job.outcome, Outcome::Cancelled);
        let stages: Vec<Stage> = job.partitions.iter().map(|p| p.stage).collect();
        assert_eq!(stages, [Stage::Done, Stage::Cancelled]);
        let other = &recovered.ended.iter().find(|e| e.job.id == done).unwrap().job;
        assert_eq!(other.outcome, Outcome::Succeeded);
    }

    /// Ends that cannot be written (a full disk) are kept, in order, the
    /// journal says it is behind, and they are written once it can.
    #[test]
    fn ends_that_cannot_be_written_wait_and_are_written_in_order_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (journal, _) = SqliteJournal::open(&path).unwrap();
        let id = JobId::new();
        let witnesses =
            vec![StoredWitness::Json(serde_json::json!(1)), StoredWitness::Json(serde_json::json!(2))];
        journal.accepted(&accepted(id, witnesses)).unwrap();
        assert!(journal.behind().is_none());
        journal.disk_full.store(true, std::sync::atomic::Ordering::Release);
        let done = EndedPartition { stage: Stage::Done, proof: None, public_inputs: vec![], error: None };
        journal.partition_ended(id, 0, &done);
        journal.partition_ended(id, 1, &done);
        journal.job_ended(id, Outcome::Succeeded, None);
        let behind = journal.behind().expect("behind while the disk is full");
        assert!(behind.contains("3 job and partition ends") && behind.contains("disk is full"), "{behind}");
        journal.flush();
        assert!(journal.behind().is_some(), "still full");
        journal.disk_full.store(false, std::sync::atomic::Ordering::Release);
        journal.flush();
        assert!(journal.behind().is_none());
        drop(journal);
        let (_, recovered) = SqliteJournal::open(&path).unwrap();
        assert!(recovered.unfinished.is_empty(), "the job's end was written: {:?}", recovered.unfinished);
        let job = &recovered.ended[0].job;
        assert_eq!(job.outcome, Outcome::Succeeded);
        assert!(job.partitions.iter().all(|p| p.stage == Stage::Done));
    }
}
