-- Unique by state, and paused queues.
--
-- unique_states is the set of states in which a job's unique key holds, as
-- bits (available 1, running 2, completed 4, dead 8, cancelled 16); NULL
-- means every state, as before. A job that moves to a state outside its
-- set loses its key for good (the trigger sets it NULL), so at most one
-- row holds a key and the existing unique index keeps enforcing it.
ALTER TABLE idem_jobs ADD COLUMN IF NOT EXISTS unique_states smallint;
CREATE OR REPLACE FUNCTION idem_jobs_release_unique_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.unique_key := NULL;
	RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS idem_jobs_unique_states ON idem_jobs;
CREATE TRIGGER idem_jobs_unique_states BEFORE UPDATE OF state ON idem_jobs FOR EACH ROW
	WHEN (NEW.unique_states IS NOT NULL AND NEW.unique_key IS NOT NULL AND
		NEW.unique_states & (CASE NEW.state WHEN 'available' THEN 1 WHEN 'running' THEN 2 WHEN 'completed' THEN 4
			WHEN 'dead' THEN 8 WHEN 'cancelled' THEN 16 ELSE 0 END) = 0)
	EXECUTE FUNCTION idem_jobs_release_unique_key();
-- A paused queue: no claim takes its jobs until it is resumed.
CREATE TABLE IF NOT EXISTS idem_job_queues (
    queue      text        PRIMARY KEY,
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL
);
