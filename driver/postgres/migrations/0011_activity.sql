-- Numbers an operator's page sums over every process: each process's
-- cumulative counters (source names the process), and per key how many
-- times it was replayed, written in one background transaction per flush,
-- never on the request path. Both new columns have constant defaults: no
-- table rewrite.
CREATE TABLE IF NOT EXISTS idem_counters (
    source     text        NOT NULL,
    name       text        NOT NULL,
    value      bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (source, name)
);
ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS replays bigint NOT NULL DEFAULT 0;
ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS last_replayed_at timestamptz;
