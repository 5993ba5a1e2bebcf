// Package inbox consumes an at-least-once stream (Kafka, SQS, webhooks)
// exactly once: each message's id is recorded, with a hash of its payload,
// in the same transaction as the consumer's effect.
//
//	in, err := inbox.New(l, nil)
//	dup, err := in.Process(ctx, "orders", msg.ID, msg.Payload, func(tx *sql.Tx) error {
//		// the effect, with tx; it commits with the record of msg.ID
//	})
//
// A redelivery (same source and id, same payload) is a no-op reported as a
// duplicate; the same id with a different payload is an error matching
// idem.ErrMismatch, never a guess. Consumers that track offsets (Kafka
// partitions) write the offset inside fn too, so that effect, record and
// position move together: see docs/inbox.md.
package inbox
