-- Leased jobs (package jobs; the outbox is built on them). Times are Unix
-- milliseconds. AUTOINCREMENT: an id is never reused after a job is pruned,
-- so an old fencing token can never name a new job.
CREATE TABLE IF NOT EXISTS idem_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    queue        TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    args         BLOB    NOT NULL,
    state        TEXT    NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease_id     INTEGER NOT NULL DEFAULT 0,
    lease_until  INTEGER,
    worker       TEXT    NOT NULL DEFAULT '',
    run_at       INTEGER NOT NULL,
    unique_key   TEXT,
    errors       TEXT    NOT NULL DEFAULT '[]',
    result       BLOB,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    attempted_at INTEGER,
    finalized_at INTEGER
);
-- A unique key holds for as long as its job exists, in any state; NULL keys
-- never conflict.
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique ON idem_jobs (queue, unique_key);
CREATE INDEX IF NOT EXISTS idem_jobs_fetch ON idem_jobs (queue, run_at, id) WHERE state = 'available';
CREATE INDEX IF NOT EXISTS idem_jobs_lease ON idem_jobs (queue, lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS idem_jobs_completed ON idem_jobs (finalized_at) WHERE state = 'completed';
CREATE INDEX IF NOT EXISTS idem_jobs_dead ON idem_jobs (queue, id) WHERE state = 'dead';
