// Package jetstream consumes a NATS JetStream stream exactly once into the
// database, and publishes an outbox into JetStream.
//
// A Consumer reads a durable pull consumer (AckExplicit) and hands each
// message to inbox.Process: the handler's effect commits in one
// transaction with the record of the message id, and the message is acked
// only after that commit. So:
//
//   - killed before the commit: nothing was written; JetStream redelivers
//     after AckWait and the effect happens then, once;
//   - killed after the commit, before the ack: JetStream redelivers, the
//     inbox finds the id recorded, and the message is acked with no second
//     effect;
//   - the same id with a different payload is not guessed at: it is
//     published to the dead-letter subject, terminated, and counted
//     (Stats.DeadLettered).
//
// The inbox id is the message's Nats-Msg-Id header (what publishers set for
// JetStream's own duplicate window, and what Publisher sets to the outbox
// message's key); a message without one is recorded under "seq:<stream
// sequence>", which is stable across redeliveries of that stored message
// but not across two publishes of the same content.
//
//	nc, _ := nats.Connect(url)
//	js, _ := jetstream.New(nc)
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
//	})
//	c, _ := idemjs.NewConsumer(in, js, cons, func(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO charges …`, m.Data())
//		return err
//	}, nil)
//	c.Run(ctx)
//
// Exactly once ends at the database: an effect outside it (an HTTP call
// from the handler) is at least once unless it is itself idempotent.
package jetstream
