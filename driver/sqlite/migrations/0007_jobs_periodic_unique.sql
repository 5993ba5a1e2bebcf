-- Unique by state, and paused queues.
--
-- unique_states is the set of states in which a job's unique key holds, as
-- bits (available 1, running 2, completed 4, dead 8, cancelled 16); NULL
-- means every state, as before. A job that moves to a state outside its
-- set loses its key for good (the trigger sets it NULL), so at most one
-- row holds a key and the existing unique index keeps enforcing it.
-- Applied once (idem_migrations): SQLite has no ADD COLUMN IF NOT EXISTS.
ALTER TABLE idem_jobs ADD COLUMN unique_states INTEGER;
CREATE TRIGGER IF NOT EXISTS idem_jobs_unique_states AFTER UPDATE OF state ON idem_jobs FOR EACH ROW
	WHEN NEW.unique_states IS NOT NULL AND NEW.unique_key IS NOT NULL AND
		(NEW.unique_states & (CASE NEW.state WHEN 'available' THEN 1 WHEN 'running' THEN 2 WHEN 'completed' THEN 4
			WHEN 'dead' THEN 8 WHEN 'cancelled' THEN 16 ELSE 0 END)) = 0
BEGIN
	UPDATE idem_jobs SET unique_key = NULL WHERE id = NEW.id;
END;
-- A paused queue: no claim takes its jobs until it is resumed. Times are
-- Unix milliseconds.
CREATE TABLE IF NOT EXISTS idem_job_queues (
    queue      TEXT    PRIMARY KEY,
    paused_at  INTEGER,
    updated_at INTEGER NOT NULL
);
