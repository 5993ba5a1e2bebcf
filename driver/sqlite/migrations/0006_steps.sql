-- Multi-step runs (idem.Run): one row per recovered step of an unfinished
-- run; index -1 is the run's header. Rows are deleted in the transaction
-- that stores the run's result. Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS idem_steps (
    scope       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    idx         INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,
    result      BLOB,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, key, idx)
) WITHOUT ROWID;
