-- provd's fleet job queue: the SQLite journal's jobs and partitions tables,
-- with what many workers need to share them (claims as leases, attempts as
-- fencing tokens, proofs written once).

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    circuit TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    error TEXT,
    partitions INTEGER NOT NULL CHECK (partitions > 0),
    created_ms BIGINT NOT NULL,
    ended_ms BIGINT,
    idempotency_key TEXT UNIQUE,
    request_digest BYTEA,
    -- The worker whose API accepted it (or 'sql' for rows written directly).
    submitted_by TEXT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state);
CREATE INDEX jobs_by_end ON jobs (ended_ms) WHERE ended_ms IS NOT NULL;

CREATE TABLE partitions (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL CHECK (idx >= 0),
    -- The job's circuit again, so that a claim filters on one table.
    circuit TEXT NOT NULL,
    witness_json TEXT,
    witness_bin BYTEA,
    state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed', 'cancelled')),
    -- Claims so far; the current claim's number is its fencing token.
    attempt INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    lease_until_ms BIGINT,
    -- The last failure's reason, kept across retries.
    error TEXT,
    queued_ms BIGINT NOT NULL,
    PRIMARY KEY (job_id, idx),
    CHECK (witness_json IS NOT NULL OR witness_bin IS NOT NULL),
    CHECK ((state = 'claimed') = (worker IS NOT NULL AND lease_until_ms IS NOT NULL))
);
CREATE INDEX partitions_claimable ON partitions (queued_ms, job_id, idx) WHERE state = 'queued';
CREATE INDEX partitions_leased ON partitions (lease_until_ms) WHERE state = 'claimed';

-- One row per partition proved: the primary key is what makes a result
-- written once, whatever workers race.
CREATE TABLE proofs (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT NOT NULL,
    proof BYTEA NOT NULL,
    public_inputs TEXT NOT NULL,
    written_ms BIGINT NOT NULL,
    PRIMARY KEY (job_id, idx),
    FOREIGN KEY (job_id, idx) REFERENCES partitions (job_id, idx) ON DELETE CASCADE
);

CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);

-- Every worker serving a circuit must prove with the same key, or a job's
-- proofs would verify against different verifying keys: the first worker
-- to serve a circuit records its key's fingerprint, the others must match.
CREATE TABLE circuits (
    name TEXT PRIMARY KEY,
    key_fingerprint TEXT NOT NULL,
    first_worker TEXT NOT NULL
);
