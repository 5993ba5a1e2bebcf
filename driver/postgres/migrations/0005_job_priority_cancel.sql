-- Job priorities (1 = highest … 4 = lowest) and the cancelled state.
-- The fetch index leads with priority so that the claim, ORDER BY
-- priority, run_at, id, stays an index scan. Cancelled jobs are pruned
-- with completed ones after Retention.
ALTER TABLE idem_jobs ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 1;
DROP INDEX IF EXISTS idem_jobs_fetch;
CREATE INDEX IF NOT EXISTS idem_jobs_fetch_priority ON idem_jobs (queue, priority, run_at, id) WHERE state = 'available';
DROP INDEX IF EXISTS idem_jobs_completed;
CREATE INDEX IF NOT EXISTS idem_jobs_finalized ON idem_jobs (finalized_at) WHERE state IN ('completed', 'cancelled');
