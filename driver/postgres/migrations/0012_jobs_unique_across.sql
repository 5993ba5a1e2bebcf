-- Unique keys across queues (jobs.UniqueOpts.AcrossQueues).
--
-- unique_across marks a key that holds across every queue. The unique
-- index on (queue, unique_key) becomes two partial ones: per queue for the
-- keys as before, and on the key alone for keys across queues, so that one
-- INSERT … ON CONFLICT DO NOTHING refuses a duplicate of either kind. The
-- two kinds never collide with each other. The by-state trigger (0007)
-- still releases a key by setting it NULL, which neither index holds.
ALTER TABLE idem_jobs ADD COLUMN IF NOT EXISTS unique_across boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique_queue ON idem_jobs (queue, unique_key) WHERE NOT unique_across;
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique_across ON idem_jobs (unique_key) WHERE unique_across;
DROP INDEX IF EXISTS idem_jobs_unique;
