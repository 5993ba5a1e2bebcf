// Package rabbitmq consumes a RabbitMQ queue exactly once into the
// database, and publishes an outbox into RabbitMQ with publisher confirms.
//
// A Consumer reads a queue with manual acknowledgements and hands each
// delivery to inbox.Process: the handler's effect commits in one
// transaction with the record of the delivery's message-id, and the
// delivery is acked only after that commit. So:
//
//   - killed (or disconnected) before the commit: nothing was written; the
//     broker requeues the unacked delivery and the effect happens then, once;
//   - killed after the commit, before the ack: the broker redelivers, the
//     inbox finds the id recorded, and the delivery is acked with no second
//     effect;
//   - a handler error rolls back and nacks with requeue; after MaxAttempts
//     the delivery is rejected without requeue, as is a message-id seen
//     before with a different payload, and one with no message-id: the
//     queue's dead-letter exchange (x-dead-letter-exchange) receives them,
//     and Stats.DeadLettered counts them.
//
// The inbox id is the AMQP message-id property (Publisher sets it to the
// outbox message's key); RabbitMQ has no stable id of its own to fall back
// on, so a message without one is dead-lettered, never guessed at.
//
//	c, _ := rabbitmq.NewConsumer(in, func() (*amqp.Connection, error) { return amqp.Dial(url) },
//		func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
//			_, err := tx.ExecContext(ctx, `INSERT INTO charges …`, d.Body)
//			return err
//		}, &rabbitmq.Config{Queue: "orders"})
//	c.Run(ctx) // reconnects until ctx ends
//
// Exactly once ends at the database: an effect outside it (an HTTP call
// from the handler) is at least once unless it is itself idempotent.
package rabbitmq
