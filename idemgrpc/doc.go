// Package idemgrpc gives unary gRPC methods the behaviour idemhttp gives an
// HTTP API: a call carrying an idempotency key runs once, and every retry
// with the same key gets the first call's answer.
//
// On the server, UnaryServerInterceptor claims the key (metadata
// "idempotency-key") in the ledger, runs the handler under a heartbeated
// lease, and records the response message (or its status) for retries,
// which get it back with the header "idempotent-replayed: true". On the
// client, UnaryClientInterceptor makes one key per logical call and retries
// the codes that mean "try again" with that same key.
//
// The contract (how long a key is authoritative, what a duplicate, a
// mismatched reuse and a late retry get) and the table of status codes,
// with the reasons for each, are in docs/grpc.md.
//
// Only unary methods are guarded. A streaming method is not covered by the
// interceptors at all (grpc-go calls them only for unary methods).
package idemgrpc
