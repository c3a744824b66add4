-- Priorities: a job's class (0 low, 1 normal, 2 high, 3 critical), kept on
-- each partition too, so that a claim orders one table. Rows written before
-- this migration were served first come first served: they are normal.

ALTER TABLE jobs ADD COLUMN priority SMALLINT NOT NULL DEFAULT 1 CHECK (priority BETWEEN 0 AND 3);
ALTER TABLE partitions ADD COLUMN priority SMALLINT NOT NULL DEFAULT 1 CHECK (priority BETWEEN 0 AND 3);
CREATE INDEX partitions_claimable_by_priority ON partitions (priority DESC, queued_ms, job_id, idx)
    WHERE state = 'queued';
