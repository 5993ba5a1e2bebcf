-- The unique indexes of 0012 hold only rows with a key.
--
-- A job without a unique key (most jobs) gave each of them an entry all
-- the same, a NULL that never conflicts, on its insert and on every
-- update that is not HOT (a claim and a completion change state, which
-- partial indexes read, so neither is). With unique_key IS NOT NULL in
-- both predicates those rows are in neither index. INSERT … ON CONFLICT
-- DO NOTHING (no conflict target) still arbitrates on both, and a lookup
-- by key (unique_key = $n) implies the predicate, so it still uses them.
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique_queue_key ON idem_jobs (queue, unique_key) WHERE unique_key IS NOT NULL AND NOT unique_across;
CREATE UNIQUE INDEX IF NOT EXISTS idem_jobs_unique_across_key ON idem_jobs (unique_key) WHERE unique_key IS NOT NULL AND unique_across;
DROP INDEX IF EXISTS idem_jobs_unique_queue;
DROP INDEX IF EXISTS idem_jobs_unique_across;
