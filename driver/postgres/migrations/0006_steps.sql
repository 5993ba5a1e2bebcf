-- Multi-step runs (idem.Run): one row per recovered step of an unfinished
-- run; index -1 is the run's header. Rows are deleted in the transaction
-- that stores the run's result.
CREATE TABLE IF NOT EXISTS idem_steps (
    scope       text        NOT NULL,
    key         text        NOT NULL,
    idx         integer     NOT NULL,
    name        text        NOT NULL,
    state       text        NOT NULL,
    attempt     bigint      NOT NULL,
    fingerprint text        NOT NULL,
    result      bytea,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key, idx)
);
