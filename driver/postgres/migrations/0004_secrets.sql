-- Secrets made once per database and kept in it: the key of the HMAC that
-- turns an Authorization header into a scope (package idemhttp), so that
-- neither the ledger nor a log line holds a digest a credential could be
-- guessed back from.
CREATE TABLE IF NOT EXISTS idem_secrets (
    name       text        NOT NULL PRIMARY KEY,
    value      bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
