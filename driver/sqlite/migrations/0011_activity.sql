-- Numbers an operator's page sums over every process: each process's
-- cumulative counters (source names the process), and per key how many
-- times it was replayed, written in one background transaction per flush,
-- never on the request path. Applied once (idem_migrations): SQLite has no
-- ADD COLUMN IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS idem_counters (
    source     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    value      INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (source, name)
);
ALTER TABLE idem_keys ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_keys ADD COLUMN last_replayed_at INTEGER;
