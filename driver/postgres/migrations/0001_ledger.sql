-- The claim ledger: one row per (scope, key).
CREATE TABLE IF NOT EXISTS idem_keys (
    scope           text        NOT NULL,
    key             text        NOT NULL,
    fingerprint     text        NOT NULL,
    state           text        NOT NULL,
    attempt         bigint      NOT NULL,
    lease_id        bigint      NOT NULL,
    lease_until     timestamptz NOT NULL,
    retention_ms    bigint      NOT NULL,
    tombstone_ms    bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    expires_at      timestamptz,
    tombstone_until timestamptz,
    status          integer     NOT NULL DEFAULT 0,
    meta            bytea,
    body            bytea,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS idem_keys_expires ON idem_keys (expires_at) WHERE state IN ('succeeded', 'failed');
CREATE INDEX IF NOT EXISTS idem_keys_tombstone ON idem_keys (tombstone_until) WHERE state = 'tombstone';
CREATE INDEX IF NOT EXISTS idem_keys_lease ON idem_keys (lease_until) WHERE state = 'in_progress';
CREATE INDEX IF NOT EXISTS idem_keys_updated ON idem_keys (updated_at);
CREATE INDEX IF NOT EXISTS idem_keys_parked ON idem_keys (updated_at) WHERE state = 'parked';
