package rabbitmq

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/crashpoint"
)

// Defaults for zero Config fields.
const (
	DefaultPrefetch    = 100
	DefaultMaxAttempts = 10
	DefaultRetryDelay  = time.Second
)

// Dialer opens a connection to the broker; Run calls it again after the
// connection is lost.
type Dialer func() (*amqp.Connection, error)

// Handler applies one delivery's effect with tx, which commits with the
// inbox record of the delivery. An error rolls both back and the delivery
// is requeued.
type Handler func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error

// Config configures a Consumer.
type Config struct {
	// Queue is the queue to consume. Required.
	Queue string
	// Source is the inbox source the message ids are recorded under.
	// Default: Queue.
	Source string
	// Prefetch is how many unacked deliveries the broker hands this
	// consumer at once. Default 100.
	Prefetch int
	// MaxAttempts is how many times a delivery whose handler fails is
	// tried before it is rejected to the queue's dead-letter exchange.
	// Attempts are counted by this process (and by the broker's
	// x-delivery-count on quorum queues). Default 10; -1 retries forever.
	MaxAttempts int
	// RetryDelay is the pause before reconnecting. While the broker stays
	// unreachable (or refuses the channel, the declaration or the
	// consume), each further attempt waits twice as long, up to
	// MaxRetryDelay; a session that got as far as consuming starts the
	// pauses over. Default 1s.
	RetryDelay time.Duration
	// MaxRetryDelay is the longest pause between reconnects. Default 30
	// times RetryDelay.
	MaxRetryDelay time.Duration
	// Declare, when set, is called on each new channel before consuming,
	// to declare what the consumer needs (its queue, bindings, dead-letter
	// queue): a broker that restarted without them (transient ones) has
	// them again before the consumer resumes. An error ends the session,
	// which is retried.
	Declare func(ch *amqp.Channel) error
	// Observe, when set, is called after each delivery was settled (acked,
	// requeued or rejected), with what happened to it.
	Observe func(Settled)
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
}

// Outcomes of a delivery, in Settled.
const (
	Processed    = "processed"     // handler ran and committed; acked
	Duplicate    = "duplicate"     // consumed before; acked without running the handler
	DeadLettered = "dead-lettered" // rejected without requeue
	Failed       = "failed"        // rolled back; requeued
)

// Settled is what became of one delivery.
type Settled struct {
	ID      string
	Payload []byte
	Outcome string
	Err     error // for Failed and DeadLettered
}

// Stats counts what a Consumer did with its deliveries.
type Stats struct {
	Processed, Duplicates, DeadLettered, Failed int64
}

// Consumer feeds a queue's deliveries into an inbox.
type Consumer struct {
	in   *inbox.Inbox
	dial Dialer
	h    Handler
	cfg  Config

	processed, duplicates, dead, failed atomic.Int64

	mu       sync.Mutex
	attempts map[string]int // message id → failed attempts seen here
}

// NewConsumer makes a Consumer of cfg.Queue.
func NewConsumer(in *inbox.Inbox, dial Dialer, h Handler, cfg *Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, &idem.InputError{Field: "inbox", Reason: "must not be nil"}
	case dial == nil:
		return nil, &idem.InputError{Field: "dialer", Reason: "must not be nil"}
	case h == nil:
		return nil, &idem.InputError{Field: "handler", Reason: "must not be nil"}
	case cfg == nil || cfg.Queue == "":
		return nil, &idem.InputError{Field: "queue", Reason: "must be named"}
	}
	c := *cfg
	c.Source = cmp.Or(c.Source, c.Queue)
	c.Prefetch = cmp.Or(c.Prefetch, DefaultPrefetch)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.MaxRetryDelay = max(c.RetryDelay, cmp.Or(c.MaxRetryDelay, 30*c.RetryDelay))
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return &Consumer{in: in, dial: dial, h: h, cfg: c, attempts: map[string]int{}}, nil
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	return Stats{Processed: c.processed.Load(), Duplicates: c.duplicates.Load(), DeadLettered: c.dead.Load(), Failed: c.failed.Load()}
}

// Run consumes until ctx is done, then closes its connection and returns
// nil. Whatever ends a session — the connection or the channel closed
// (the broker restarting, or closing the channel on an error such as a
// queue not found while it is still recovering), the consumer cancelled,
// a failed dial — is logged, and a new session is dialled after a pause
// (RetryDelay, doubling up to MaxRetryDelay), for as long as ctx lasts.
// The broker requeues what was not acked.
func (c *Consumer) Run(ctx context.Context) error {
	delay := c.cfg.RetryDelay
	pause := time.NewTimer(delay)
	pause.Stop()
	for ctx.Err() == nil {
		consumed := false
		err := c.session(ctx, func() { consumed = true })
		if ctx.Err() != nil {
			break
		}
		if consumed {
			delay = c.cfg.RetryDelay
		}
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq consumer disconnected; reconnecting",
			slog.String("queue", c.cfg.Queue), slog.Duration("after", delay), slog.Any("err", err))
		pause.Reset(delay)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		delay = min(2*delay, c.cfg.MaxRetryDelay)
	}
	return nil
}

// closeTimeout bounds the close handshake of a session's connection (a
// broker that stopped answering).
const closeTimeout = 5 * time.Second

// session consumes on one connection until it fails or ctx ends; it calls
// consuming once the broker accepted the consume. Its error says why it
// ended (nil when ctx did).
func (c *Consumer) session(ctx context.Context, consuming func()) error {
	conn, err := c.dial()
	if err != nil {
		return fmt.Errorf("rabbitmq: dial: %w", err)
	}
	defer conn.CloseDeadline(time.Now().Add(closeTimeout))
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open a channel: %w", err)
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if c.cfg.Declare != nil {
		if err := c.cfg.Declare(ch); err != nil {
			return fmt.Errorf("rabbitmq: declare for %q: %w", c.cfg.Queue, err)
		}
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: qos: %w", err)
	}
	ds, err := ch.ConsumeWithContext(ctx, c.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %q: %w", c.cfg.Queue, err)
	}
	consuming()
	for {
		// A closed connection or channel ends the session even if the
		// deliveries channel stays open (a Dialer whose connections
		// recover on their own), and even with deliveries still buffered:
		// they cannot be acked on a dead channel.
		select {
		case <-ctx.Done():
			return nil
		case err := <-connClosed:
			return closedError("connection", c.cfg.Queue, err)
		case err := <-chClosed:
			return closedError("channel", c.cfg.Queue, err)
		case d, ok := <-ds:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("rabbitmq: deliveries of %q ended (consumer cancelled or channel closed)", c.cfg.Queue)
			}
			c.Handle(ctx, d)
		}
	}
}

func closedError(what, queue string, err *amqp.Error) error {
	if err == nil {
		return fmt.Errorf("rabbitmq: %s consuming %q closed", what, queue)
	}
	return fmt.Errorf("rabbitmq: %s consuming %q closed: %w", what, queue, err)
}

// Handle processes one delivery and acks, requeues or rejects it. It
// returns nil when the delivery is done with (processed, duplicate or
// dead-lettered) and the error when it was requeued.
func (c *Consumer) Handle(ctx context.Context, d amqp.Delivery) error {
	id := d.MessageId
	if id == "" {
		return c.reject(ctx, d, id, errors.New("rabbitmq: the message has no message-id, so its redeliveries cannot be told apart from new messages"))
	}
	dup, err := c.in.Process(ctx, c.cfg.Source, id, d.Body, func(tx *sql.Tx) error {
		if err := c.h(ctx, tx, d); err != nil {
			return err
		}
		crashpoint.Hit(crashpoint.BeforeCommit)
		return nil
	})
	switch {
	case errors.Is(err, idem.ErrMismatch):
		return c.reject(ctx, d, id, err)
	case err != nil && ctx.Err() != nil:
		// Stopping: not the message's fault, so not an attempt.
		d.Nack(false, true)
		return err
	case err != nil:
		c.failed.Add(1)
		if n := c.failedAttempt(id, d); c.cfg.MaxAttempts > 0 && n >= c.cfg.MaxAttempts {
			return c.reject(ctx, d, id, fmt.Errorf("%d attempts failed, the last: %w", n, err))
		}
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq delivery failed; requeued",
			slog.String("source", c.cfg.Source), slog.String("message_id", id), slog.Any("err", err))
		if nerr := d.Nack(false, true); nerr != nil {
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq nack failed; the broker requeues it when the channel closes", slog.Any("err", nerr))
		}
		c.observe(Settled{ID: id, Payload: d.Body, Outcome: Failed, Err: err})
		return err
	}
	outcome := Processed
	if dup {
		outcome = Duplicate
		c.duplicates.Add(1)
	} else {
		c.processed.Add(1)
	}
	c.forget(id)
	crashpoint.Hit(crashpoint.AfterCommit)
	if err := d.Ack(false); err != nil {
		// The effect committed: the redelivery is a duplicate, acked then.
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq ack failed; the redelivery will be a no-op", slog.String("message_id", id), slog.Any("err", err))
	}
	c.observe(Settled{ID: id, Payload: d.Body, Outcome: outcome})
	return nil
}

// reject dead-letters d: rejected without requeue, to the queue's
// dead-letter exchange if it has one (RabbitMQ drops it otherwise).
func (c *Consumer) reject(ctx context.Context, d amqp.Delivery, id string, cause error) error {
	if err := d.Reject(false); err != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq reject failed; the broker requeues it when the channel closes",
			slog.String("message_id", id), slog.Any("err", err))
		return fmt.Errorf("rabbitmq: reject message %q: %w (cause: %w)", id, err, cause)
	}
	c.dead.Add(1)
	c.forget(id)
	c.cfg.Logger.LogAttrs(ctx, slog.LevelError, "rabbitmq message dead-lettered",
		slog.String("source", c.cfg.Source), slog.String("message_id", id), slog.Any("err", cause))
	c.observe(Settled{ID: id, Payload: d.Body, Outcome: DeadLettered, Err: cause})
	return nil
}

func (c *Consumer) observe(s Settled) {
	if c.cfg.Observe != nil {
		c.cfg.Observe(s)
	}
}

// maxTracked bounds the attempts map: a consumer flooded with failing
// messages forgets the counts and starts them again.
const maxTracked = 10000

// failedAttempt counts a failed attempt at id and returns how many there
// were: this process's count, or the broker's (quorum queues) if higher.
func (c *Consumer) failedAttempt(id string, d amqp.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.attempts) >= maxTracked {
		clear(c.attempts)
	}
	c.attempts[id]++
	n := c.attempts[id]
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		n = max(n, int(v)+1)
	case int32:
		n = max(n, int(v)+1)
	}
	return n
}

func (c *Consumer) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attempts, id)
}
