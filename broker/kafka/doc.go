// Package kafka consumes Kafka topics with exactly one effect per record
// in the ledger's database, and publishes an outbox's messages to Kafka.
//
// A Consumer is a member of a Kafka consumer group (franz-go). For each
// batch of a partition's records it opens one transaction of the ledger's
// database and, in it, records every record in the inbox (package inbox),
// runs the Handler for those seen for the first time, and stores the
// partition's next offset (table idem_kafka_offsets, through the driver's
// Offsets interface). Effect, inbox row and offset commit together or not
// at all. On every partition assignment the consumer starts at the offset
// stored in the database, not the one Kafka holds; it never commits
// offsets to Kafka. This is Watermill's "SQL offsets" pattern with the
// inbox added, so that records read again (an offset reset, a stale member
// finishing a batch after a rebalance, a message a producer wrote twice
// when records are named by KeyID or HeaderID) have no second effect.
//
//	c, err := kafka.NewConsumer(l, &kafka.Config{Seeds: seeds, Group: "billing", Topics: []string{"orders"}},
//		func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
//			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(r.Key))
//			return err
//		})
//	err = c.Run(ctx)
//
// Exactly once ends at the transaction: the handler's writes with tx are
// applied once; anything else it does (an HTTP call) happens again when
// the transaction rolls back.
//
// A Publisher is an outbox.Publisher: the outbox relay hands it each
// delivery, and it produces a record with franz-go's idempotent producer,
// the outbox message id as key and in the IDHeader header.
//
// The tests run against kfake, franz-go's in-process Kafka, since no Kafka
// broker can be installed where idem is built; docs/inbox.md says what
// that does and does not cover.
package kafka
