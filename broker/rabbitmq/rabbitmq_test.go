package rabbitmq_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/broker/rabbitmq"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/brokertest"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/outbox"
)

var seq atomic.Int64

// env is one test's ledger, inbox, broker channel and queue (with a
// dead-letter queue "<queue>.dead" behind the default exchange).
type env struct {
	l      *idem.Ledger
	in     *inbox.Inbox
	dial   rabbitmq.Dialer
	ch     *amqp.Channel
	queue  string
	rebind func(string) string
}

func setup(t testing.TB, driver string) *env {
	t.Helper()
	srv := brokertest.Shared(t, brokertest.RabbitMQ)
	l := ledgertest.Open(t, driver)
	in, err := inbox.New(l, &inbox.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{l: l, in: in, queue: fmt.Sprintf("t%d", seq.Add(1)), rebind: func(q string) string { return q }}
	if driver == "postgres" {
		e.rebind = postgres.Rebind
	}
	e.dial = func() (*amqp.Connection, error) { return amqp.Dial(srv.URL()) }
	conn, err := e.dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if e.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclare(e.queue+".dead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": e.queue + ".dead",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Driver().DB().Exec(`CREATE TABLE effects (id TEXT NOT NULL, body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) publish(t testing.TB, id, body string) {
	t.Helper()
	err := e.ch.PublishWithContext(context.Background(), "", e.queue, false, false, amqp.Publishing{MessageId: id, Body: []byte(body), DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) effect(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
	_, err := tx.ExecContext(ctx, e.rebind(`INSERT INTO effects (id, body) VALUES (?, ?)`), d.MessageId, string(d.Body))
	return err
}

func (e *env) consumer(t testing.TB, h rabbitmq.Handler, cfg *rabbitmq.Config) *rabbitmq.Consumer {
	t.Helper()
	if h == nil {
		h = e.effect
	}
	if cfg == nil {
		cfg = &rabbitmq.Config{}
	}
	cfg.Queue, cfg.Logger = e.queue, slog.New(slog.DiscardHandler)
	cfg.RetryDelay = 50 * time.Millisecond
	c, err := rabbitmq.NewConsumer(e.in, e.dial, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) effects(t *testing.T) (rows, distinct int) {
	t.Helper()
	if err := e.l.Driver().DB().QueryRow(`SELECT COUNT(*), COUNT(DISTINCT id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// depth is how many messages queue holds ready.
func (e *env) depth(t *testing.T, queue string) int {
	t.Helper()
	q, err := e.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// waitDepth reads queue's depth until it is want, for at most 10 s, and
// returns the last depth read.
func (e *env) waitDepth(t *testing.T, queue string, want int) int {
	t.Helper()
	got := e.depth(t, queue)
	for deadline := time.Now().Add(10 * time.Second); got != want && time.Now().Before(deadline); got = e.depth(t, queue) {
		time.Sleep(20 * time.Millisecond)
	}
	return got
}

func runUntil(t *testing.T, done func() bool, cs ...*rabbitmq.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	stopped := make(chan struct{}, len(cs))
	for _, c := range cs {
		go func() { c.Run(ctx); stopped <- struct{}{} }()
	}
	for !done() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	failed := ctx.Err() != nil
	cancel()
	for range cs {
		<-stopped
	}
	if failed {
		t.Fatal("the consumers did not finish within a minute")
	}
}

// Every message published twice under one message-id (RabbitMQ does not
// deduplicate), taken by two competing consumers: one effect each.
func TestDuplicateDeliveriesHaveOneEffect(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			const n = 50
			for range 2 {
				for i := range n {
					e.publish(t, fmt.Sprintf("order-%d", i), fmt.Sprintf(`{"n":%d}`, i))
				}
			}
			a, b := e.consumer(t, nil, nil), e.consumer(t, nil, nil)
			runUntil(t, func() bool {
				sa, sb := a.Stats(), b.Stats()
				return sa.Processed+sa.Duplicates+sb.Processed+sb.Duplicates == 2*n
			}, a, b)
			if rows, distinct := e.effects(t); rows != n || distinct != n {
				t.Fatalf("%d effects for %d ids, want %d", rows, distinct, n)
			}
			if sa, sb := a.Stats(), b.Stats(); sa.Duplicates+sb.Duplicates != n {
				t.Fatalf("stats %+v, %+v: want %d duplicates", sa, sb, n)
			}
		})
	}
}

// A changed payload under a known message-id, and a message without a
// message-id, are rejected to the queue's dead-letter exchange and counted.
func TestChangedPayloadAndNoIDAreDeadLettered(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			e.publish(t, "order-1", `{"amount":100}`)
			e.publish(t, "order-1", `{"amount":999}`)
			e.publish(t, "", `{"amount":5}`)
			var settled []rabbitmq.Settled
			c := e.consumer(t, nil, &rabbitmq.Config{Prefetch: 1, Observe: func(s rabbitmq.Settled) { settled = append(settled, s) }})
			runUntil(t, func() bool { s := c.Stats(); return s.Processed == 1 && s.DeadLettered == 2 }, c)
			if rows, _ := e.effects(t); rows != 1 {
				t.Fatalf("%d effects, want 1", rows)
			}
			// The broker routes a rejected message to the dead-letter
			// exchange after the reject is sent: wait for it to land.
			if got := e.waitDepth(t, e.queue+".dead", 2); got != 2 {
				t.Fatalf("%d dead letters, want 2", got)
			}
			if len(settled) != 3 || settled[1].Outcome != rabbitmq.DeadLettered || settled[1].Err == nil {
				t.Fatalf("observed %+v", settled)
			}
		})
	}
}

// A handler error rolls back and requeues; after MaxAttempts the message
// is dead-lettered.
func TestHandlerErrorRetriesThenDeadLetters(t *testing.T) {
	e := setup(t, "sqlite")
	e.publish(t, "flaky", "f")
	e.publish(t, "poison", "p")
	var flaky atomic.Int64
	c := e.consumer(t, func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
		if err := e.effect(ctx, tx, d); err != nil {
			return err
		}
		if d.MessageId == "poison" || flaky.Add(1) <= 2 {
			return fmt.Errorf("refused")
		}
		return nil
	}, &rabbitmq.Config{MaxAttempts: 3})
	runUntil(t, func() bool { s := c.Stats(); return s.Processed == 1 && s.DeadLettered == 1 }, c)
	if s := c.Stats(); s.Failed != 2+3 {
		t.Fatalf("stats %+v: want 5 failures", s)
	}
	if rows, _ := e.effects(t); rows != 1 {
		t.Fatalf("%d effects, want 1", rows)
	}
}

// The outbox relay publishes through Publisher with confirms and the
// message's key as message-id: a delivery published twice (a relay that
// died after the confirm) reaches the queue twice and is applied once.
func TestOutboxPublisher(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			ctx := context.Background()
			pub, err := rabbitmq.NewPublisher(e.dial, &rabbitmq.PublisherConfig{RoutingKey: e.queue})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			ob, err := outbox.New(e.l, &outbox.Config{Publisher: pub, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			for i := range n {
				tx, err := ob.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprintf("m%d", i), Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if err := pub.Publish(ctx, outbox.Envelope{Key: "m3", Body: []byte(`{"n":3}`)}); err != nil {
				t.Fatal(err)
			}
			if err := ob.Start(ctx); err != nil {
				t.Fatal(err)
			}
			c := e.consumer(t, nil, nil)
			runUntil(t, func() bool { s := c.Stats(); return s.Processed == n && s.Duplicates == 1 }, c)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := ob.Stop(sctx); err != nil {
				t.Fatal(err)
			}
			if rows, distinct := e.effects(t); rows != n || distinct != n {
				t.Fatalf("%d effects for %d ids, want %d", rows, distinct, n)
			}
		})
	}
}

// A delivery no queue takes is returned by the broker: Publish fails (the
// relay retries it) rather than reporting it sent.
func TestPublisherUnroutableIsAnError(t *testing.T) {
	e := setup(t, "sqlite")
	pub, err := rabbitmq.NewPublisher(e.dial, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), outbox.Envelope{Key: "k", To: "no-such-queue-" + e.queue, Body: []byte("x")}); err == nil {
		t.Fatal("an unroutable message was reported published")
	}
	if err := pub.Publish(context.Background(), outbox.Envelope{Key: "k2", To: e.queue, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if got := e.depth(t, e.queue); got != 1 {
		t.Fatalf("queue holds %d, want 1", got)
	}
}
