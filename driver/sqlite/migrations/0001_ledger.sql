-- The claim ledger: one row per (scope, key). Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS idem_keys (
    scope           TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    attempt         INTEGER NOT NULL,
    lease_id        INTEGER NOT NULL,
    lease_until     INTEGER NOT NULL,
    retention_ms    INTEGER NOT NULL,
    tombstone_ms    INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    completed_at    INTEGER,
    expires_at      INTEGER,
    tombstone_until INTEGER,
    status          INTEGER NOT NULL DEFAULT 0,
    meta            BLOB,
    body            BLOB,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS idem_keys_expires ON idem_keys (expires_at) WHERE state IN ('succeeded', 'failed');
CREATE INDEX IF NOT EXISTS idem_keys_tombstone ON idem_keys (tombstone_until) WHERE state = 'tombstone';
CREATE INDEX IF NOT EXISTS idem_keys_lease ON idem_keys (lease_until) WHERE state = 'in_progress';
CREATE INDEX IF NOT EXISTS idem_keys_updated ON idem_keys (updated_at);
CREATE INDEX IF NOT EXISTS idem_keys_parked ON idem_keys (updated_at) WHERE state = 'parked';
