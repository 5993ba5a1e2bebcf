-- The inbox: one row per consumed message (package inbox).
CREATE TABLE IF NOT EXISTS idem_inbox (
    source       text        NOT NULL,
    message_id   text        NOT NULL,
    payload_hash text        NOT NULL,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (source, message_id)
);
CREATE INDEX IF NOT EXISTS idem_inbox_received ON idem_inbox (received_at);
