// Package idemhttp gives an HTTP API Idempotency-Key semantics, as Stripe
// documents them and the IETF draft "The Idempotency-Key HTTP Header
// Field" specifies them, as net/http middleware on an idem.Ledger.
//
//	l, _ := dburl.Open(ctx, "sqlite:idem.db", nil)
//	mux.Handle("POST /charges", idemhttp.Middleware(l, nil)(charges))
//
// For a guarded request (POST and PATCH by default) carrying a key:
//
//   - the first is handled once; its status, allow-listed headers and body
//     are stored with the request's fingerprint (method, path, query, body;
//     JSON compared in canonical form);
//   - a retry after it finished gets the stored response byte for byte, with
//     Idempotent-Replayed: true and Cache-Control: no-store, and the handler
//     does not run;
//   - a retry while the first runs gets 409 with Retry-After (or, with
//     OnConflict Wait, waits for the first and gets its response);
//   - the same key with a different request gets 422, and nothing runs;
//   - a missing key (when required) or a malformed one gets 400, and a body
//     over MaxBody gets 413, before any database access.
//
// Every answer that is not the handler's own is RFC 9457
// application/problem+json, with a type URI under ProblemBase.
//
// Keys live in a scope (Options.Scope, by default a keyed hash of the
// Authorization header under a secret kept in the database): a client never
// receives another scope's stored response, and never a 409 caused by
// another scope's request. A request with a key but no credential is
// refused (400 scope-missing) unless Options.AnonymousScope shares one
// scope among such callers.
//
// Answers that say "nothing was done" (401, 403, 408, 425, 429:
// Options.ReleaseStatus; 5xx: Options.ServerErrors) release the key
// instead of being stored. A compressed response is stored with its
// Content-Encoding and decoded for a retry that does not accept it.
//
// # Two modes
//
// Middleware (lease-bound) claims the key in a short write of its own,
// heartbeats the claim while the handler runs, then records the response.
// It fits external work: calling a payment provider, sending a message. If
// the process dies in between, the key is handled again after its lease,
// with the same key, which the handler should forward downstream.
//
// TxMiddleware (transaction-bound) claims the key inside a transaction on
// the ledger's database and gives it to the handler (Tx); the handler's
// rows, the key's completion and the stored response commit together, so a
// crash leaves all or nothing. It fits effects that are rows in the same
// database. On SQLite the transaction holds the only writer for the
// handler's whole run.
//
// A handler can say what its answer means for the key: Release (the effect
// certainly did not happen; the key is freed) or Unknown (it may have; the
// claim is left to its lease). The gateway package uses them to tell a
// refused connection from a timeout.
//
// docs/http.md has the full table, the 5xx policy and the contract: how
// long a key is authoritative, what a duplicate gets, what a mismatched
// reuse gets, and what happens after expiry.
package idemhttp
