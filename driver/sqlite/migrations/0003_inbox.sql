-- The inbox: one row per consumed message (package inbox). Times are Unix
-- milliseconds.
CREATE TABLE IF NOT EXISTS idem_inbox (
    source       TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    payload_hash TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (source, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_inbox_received ON idem_inbox (received_at);
