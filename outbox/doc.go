// Package outbox delivers messages over HTTP (webhook style) exactly once
// per key: a message is added in the same transaction as the business
// change that caused it, and a relay delivers it afterwards with a stable
// Idempotency-Key, retrying with backoff and recording the outcome.
//
//	ob, err := outbox.New(l, nil)
//	tx, _ := ob.DB().BeginTx(ctx, nil)
//	// … the business write, with tx …
//	id, err := ob.Add(ctx, tx, outbox.Message{URL: "https://example.com/hook", Body: body})
//	tx.Commit()
//	ob.Start(ctx) // the relay; any number of processes may run one
//
// The relay is a consumer of package jobs, not a second queue: each message
// is a job whose unique key is its Idempotency-Key, so it inherits leases,
// fencing, heartbeats, backoff, dead letters and graceful shutdown.
//
// # Fan-out
//
// A message with Recipients (say 10,000 device tokens) is split into chunks
// of ChunkSize (say 500), each its own delivery with its own key
// "<message id>/<chunk n>". A chunk that fails is retried alone; chunks that
// succeeded are never sent again.
//
// # Guarantees
//
// Delivery is at least once: a relay that crashes after the receiver
// answered but before the answer was recorded delivers again, with the same
// key. The effect is exactly once when the receiver honours the key (as an
// idem-guarded endpoint does). docs/outbox.md has the details.
//
// # Brokers
//
// With Config.Publisher the relay publishes to a message broker instead
// of making HTTP requests (broker/jetstream, broker/rabbitmq), each
// delivery under its key as the broker message id, so that a consumer's
// inbox applies a republished delivery once.
package outbox
