-- Job metadata (a JSON object the enqueuer attaches), the partition key a
-- per-partition concurrency limit counts by, and one row per rate-limited
-- queue: the claims made in its current window (window_start is the
-- window's number: epoch milliseconds / interval). Applied once
-- (idem_migrations): SQLite has no ADD COLUMN IF NOT EXISTS.
ALTER TABLE idem_jobs ADD COLUMN metadata TEXT;
ALTER TABLE idem_jobs ADD COLUMN partition_key TEXT;
CREATE TABLE IF NOT EXISTS idem_job_rates (
    queue        TEXT    PRIMARY KEY,
    window_start INTEGER NOT NULL,
    claimed      INTEGER NOT NULL
);
