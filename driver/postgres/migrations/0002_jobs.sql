-- Leased jobs (package jobs; the outbox is built on them).
CREATE TABLE IF NOT EXISTS idem_jobs (
    id           bigserial   PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    args         bytea       NOT NULL,
    state        text        NOT NULL,
    attempt      integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL,
    lease_id     bigint      NOT NULL DEFAULT 0,
    lease_until  timestamptz,
    worker       text        NOT NULL DEFAULT '',
    run_at       timestamptz NOT NULL,
    unique_key   text,
    errors       jsonb       NOT NULL DEFAULT '[]',
    result       bytea,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    attempted_at timestamptz,
    finalized_at timestamptz
);
-- A unique key holds for as long as its job exists, in any state; NULL keys
-- never conflict.
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique ON idem_jobs (queue, unique_key);
CREATE INDEX IF NOT EXISTS idem_jobs_fetch ON idem_jobs (queue, run_at, id) WHERE state = 'available';
CREATE INDEX IF NOT EXISTS idem_jobs_lease ON idem_jobs (queue, lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS idem_jobs_completed ON idem_jobs (finalized_at) WHERE state = 'completed';
CREATE INDEX IF NOT EXISTS idem_jobs_dead ON idem_jobs (queue, id) WHERE state = 'dead';
