-- Secrets made once per database and kept in it: the key of the HMAC that
-- turns an Authorization header into a scope (package idemhttp), so that
-- neither the ledger nor a log line holds a digest a credential could be
-- guessed back from. created_at is Unix milliseconds.
CREATE TABLE IF NOT EXISTS idem_secrets (
    name       TEXT    NOT NULL PRIMARY KEY,
    value      BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
