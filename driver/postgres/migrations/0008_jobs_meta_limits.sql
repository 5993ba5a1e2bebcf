-- Job metadata (a JSON object the enqueuer attaches), the partition key a
-- per-partition concurrency limit counts by, and one row per rate-limited
-- queue: the claims made in its current window (window_start is the
-- window's number: database epoch milliseconds / interval).
ALTER TABLE idem_jobs ADD COLUMN IF NOT EXISTS metadata jsonb;
ALTER TABLE idem_jobs ADD COLUMN IF NOT EXISTS partition_key text;
CREATE TABLE IF NOT EXISTS idem_job_rates (
    queue        text    PRIMARY KEY,
    window_start bigint  NOT NULL,
    claimed      integer NOT NULL
);
