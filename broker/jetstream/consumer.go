package jetstream

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/crashpoint"
)

// Defaults for zero Config fields.
const (
	DefaultMaxAttempts = 10
	DefaultRetryDelay  = time.Second
	DefaultBatch       = 100
	DefaultMaxWait     = time.Second
	// DeadLetterPrefix is followed by the stream name in the default
	// dead-letter subject.
	DeadLetterPrefix = "idem.deadletter."
)

// Handler applies one message's effect with tx, which commits with the
// inbox record of the message. An error rolls both back; the message is
// redelivered after Config.RetryDelay.
type Handler func(ctx context.Context, tx *sql.Tx, msg js.Msg) error

// Config configures a Consumer. A nil *Config means all defaults.
type Config struct {
	// Source is the inbox source the message ids are recorded under.
	// Default: the stream's name.
	Source string
	// DeadLetterSubject receives, through JetStream, the messages that are
	// not processed: an id seen before with a different payload, and a
	// message whose handler failed MaxAttempts times. Each carries the
	// original data and headers plus Idem-Dead-Reason, Idem-Subject and
	// Idem-Stream-Seq. Create a stream over it to keep them. Default
	// "idem.deadletter.<stream>".
	DeadLetterSubject string
	// MaxAttempts is how many deliveries a message whose handler fails
	// gets before it is dead-lettered. Default 10; -1 retries forever.
	MaxAttempts int
	// RetryDelay is the delay before a failed message is redelivered.
	// Default 1s.
	RetryDelay time.Duration
	// Batch and MaxWait bound one fetch. Defaults 100 and 1s.
	Batch   int
	MaxWait time.Duration
	// Observe, when set, is called after each message was settled (acked,
	// nak'ed or dead-lettered), with what happened to it.
	Observe func(Settled)
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
}

// Outcomes of a message, in Settled.
const (
	Processed    = "processed"     // handler ran and committed; acked
	Duplicate    = "duplicate"     // consumed before; acked without running the handler
	DeadLettered = "dead-lettered" // sent to the dead-letter subject and terminated
	Failed       = "failed"        // rolled back; nak'ed for redelivery
)

// Settled is what became of one message.
type Settled struct {
	ID      string
	Payload []byte
	Outcome string
	Err     error // for Failed and DeadLettered
}

// Stats counts what a Consumer did with the messages it got.
type Stats struct {
	Processed    int64 // handler ran and its transaction committed
	Duplicates   int64 // already consumed: acked without running the handler
	DeadLettered int64 // payload mismatch or attempts exhausted: sent to the dead-letter subject
	Failed       int64 // handler or database error: redelivered later
}

// Consumer feeds a durable pull consumer's messages into an inbox.
type Consumer struct {
	in     *inbox.Inbox
	js     js.JetStream
	cons   js.Consumer
	h      Handler
	cfg    Config
	stream string

	processed, duplicates, dead, failed atomic.Int64
}

// NewConsumer makes a Consumer of cons, which must be a pull consumer
// with AckPolicy AckExplicit (durable, so that a restarted process
// continues where the last one acked). j publishes the dead letters.
func NewConsumer(in *inbox.Inbox, j js.JetStream, cons js.Consumer, h Handler, cfg *Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, &idem.InputError{Field: "inbox", Reason: "must not be nil"}
	case j == nil || cons == nil:
		return nil, &idem.InputError{Field: "consumer", Reason: "must not be nil"}
	case h == nil:
		return nil, &idem.InputError{Field: "handler", Reason: "must not be nil"}
	}
	info := cons.CachedInfo()
	if info == nil || info.Config.AckPolicy != js.AckExplicitPolicy {
		return nil, &idem.InputError{Field: "consumer", Reason: "must have AckPolicy AckExplicit: a message is acked only after its effect committed"}
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Source = cmp.Or(c.Source, info.Stream)
	c.DeadLetterSubject = cmp.Or(c.DeadLetterSubject, DeadLetterPrefix+info.Stream)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.Batch = cmp.Or(c.Batch, DefaultBatch)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return &Consumer{in: in, js: j, cons: cons, h: h, cfg: c, stream: info.Stream}, nil
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	return Stats{Processed: c.processed.Load(), Duplicates: c.duplicates.Load(), DeadLettered: c.dead.Load(), Failed: c.failed.Load()}
}

// Run fetches and handles messages until ctx is done, then returns nil.
// Fetch errors (the server restarting, the connection reconnecting) are
// logged and retried. Messages fetched but not yet handled when ctx ends
// are redelivered after the consumer's AckWait.
func (c *Consumer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		batch, err := c.cons.Fetch(c.cfg.Batch, js.FetchMaxWait(c.cfg.MaxWait))
		if err == nil {
			for msg := range batch.Messages() {
				if ctx.Err() != nil {
					break // not acked: redelivered
				}
				c.Handle(ctx, msg)
			}
			err = batch.Error()
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "jetstream fetch failed", slog.String("stream", c.stream), slog.Any("err", err))
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.RetryDelay):
			}
		}
	}
	return nil
}

// ID is the inbox id of msg: its Nats-Msg-Id header, or "seq:<stream
// sequence>" without one.
func ID(msg js.Msg) (string, error) {
	if id := msg.Headers().Get(js.MsgIDHeader); id != "" {
		return id, nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", err
	}
	return "seq:" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// Handle processes one message and acks, naks or dead-letters it. It
// returns nil when the message is done with (processed, duplicate or
// dead-lettered), and the error otherwise (the message was nak'ed and
// comes back after RetryDelay).
func (c *Consumer) Handle(ctx context.Context, msg js.Msg) error {
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("jetstream: not a JetStream message: %w", err)
	}
	id, _ := ID(msg)
	dup, err := c.in.Process(ctx, c.cfg.Source, id, msg.Data(), func(tx *sql.Tx) error {
		if err := c.h(ctx, tx, msg); err != nil {
			return err
		}
		crashpoint.Hit(crashpoint.BeforeCommit)
		return nil
	})
	switch {
	case errors.Is(err, idem.ErrMismatch):
		return c.deadLetter(ctx, msg, md, id, err)
	case err != nil && ctx.Err() != nil:
		// Stopping: not the message's fault, so not an attempt.
		msg.Nak()
		return err
	case err != nil:
		c.failed.Add(1)
		if c.cfg.MaxAttempts > 0 && md.NumDelivered >= uint64(c.cfg.MaxAttempts) {
			return c.deadLetter(ctx, msg, md, id, fmt.Errorf("%d attempts failed, the last: %w", md.NumDelivered, err))
		}
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "jetstream message failed; redelivering",
			slog.String("source", c.cfg.Source), slog.String("message_id", id), slog.Uint64("attempt", md.NumDelivered), slog.Any("err", err))
		if nerr := msg.NakWithDelay(c.cfg.RetryDelay); nerr != nil {
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "jetstream nak failed; redelivered after AckWait", slog.Any("err", nerr))
		}
		c.observe(Settled{ID: id, Payload: msg.Data(), Outcome: Failed, Err: err})
		return err
	}
	outcome := Processed
	if dup {
		outcome = Duplicate
		c.duplicates.Add(1)
	} else {
		c.processed.Add(1)
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	if err := msg.Ack(); err != nil {
		// The effect committed: the redelivery is a duplicate, acked then.
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "jetstream ack failed; the redelivery will be a no-op", slog.String("message_id", id), slog.Any("err", err))
	}
	c.observe(Settled{ID: id, Payload: msg.Data(), Outcome: outcome})
	return nil
}

func (c *Consumer) observe(s Settled) {
	if c.cfg.Observe != nil {
		c.cfg.Observe(s)
	}
}

// Header names on a dead letter.
const (
	HeaderDeadReason = "Idem-Dead-Reason"
	HeaderSubject    = "Idem-Subject"
	HeaderStreamSeq  = "Idem-Stream-Seq"
)

// deadLetter publishes msg to the dead-letter subject and terminates it.
// If the publish fails the message is nak'ed instead, so it is not lost.
func (c *Consumer) deadLetter(ctx context.Context, msg js.Msg, md *js.MsgMetadata, id string, cause error) error {
	dl := nats.NewMsg(c.cfg.DeadLetterSubject)
	dl.Data = msg.Data()
	for k, vs := range msg.Headers() {
		dl.Header[k] = vs
	}
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	// A crash between this publish and the Term publishes it again under
	// the same id, which JetStream's duplicate window drops.
	dl.Header.Set(js.MsgIDHeader, id+"@"+c.stream+":"+seq)
	dl.Header.Set(HeaderDeadReason, cause.Error())
	dl.Header.Set(HeaderSubject, msg.Subject())
	dl.Header.Set(HeaderStreamSeq, seq)
	if _, err := c.js.PublishMsg(ctx, dl); err != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelError, "jetstream dead letter not published; redelivering",
			slog.String("subject", c.cfg.DeadLetterSubject), slog.String("message_id", id), slog.Any("err", err))
		msg.NakWithDelay(c.cfg.RetryDelay)
		return fmt.Errorf("jetstream: dead-letter message %q: %w (cause: %w)", id, err, cause)
	}
	c.dead.Add(1)
	c.cfg.Logger.LogAttrs(ctx, slog.LevelError, "jetstream message dead-lettered",
		slog.String("source", c.cfg.Source), slog.String("message_id", id), slog.String("subject", c.cfg.DeadLetterSubject), slog.Any("err", cause))
	if err := msg.Term(); err != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "jetstream term failed", slog.String("message_id", id), slog.Any("err", err))
	}
	c.observe(Settled{ID: id, Payload: msg.Data(), Outcome: DeadLettered, Err: cause})
	return nil
}
