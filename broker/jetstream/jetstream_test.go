package jetstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemdev/idem"
	idemjs "github.com/idemdev/idem/broker/jetstream"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/brokertest"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/outbox"
)

var seq atomic.Int64

// env is one test's ledger, inbox, JetStream and stream.
type env struct {
	l      *idem.Ledger
	in     *inbox.Inbox
	js     js.JetStream
	stream string // also the subject prefix: "<stream>.>"
	rebind func(string) string
}

func setup(t testing.TB, driver string) *env {
	t.Helper()
	srv := brokertest.Shared(t, brokertest.NATS)
	l := ledgertest.Open(t, driver)
	in, err := inbox.New(l, &inbox.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{l: l, in: in, js: j, stream: fmt.Sprintf("T%d", seq.Add(1)), rebind: func(q string) string { return q }}
	if driver == "postgres" {
		e.rebind = postgres.Rebind
	}
	e.createStream(t, e.stream)
	if _, err := l.Driver().DB().Exec(`CREATE TABLE effects (id TEXT NOT NULL, body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) createStream(t testing.TB, name string) {
	t.Helper()
	if _, err := e.js.CreateStream(context.Background(), js.StreamConfig{Name: name, Subjects: []string{name + ".>"}}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) publish(t testing.TB, subject, id, body string) *js.PubAck {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	if id != "" {
		m.Header.Set(js.MsgIDHeader, id)
	}
	ack, err := e.js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// consumer makes a durable consumer of stream and an idem Consumer on it
// whose effect is a row in effects.
func (e *env) consumer(t *testing.T, stream, durable string, cfg *idemjs.Config) *idemjs.Consumer {
	t.Helper()
	cons, err := e.js.CreateOrUpdateConsumer(context.Background(), stream, js.ConsumerConfig{
		Durable: durable, AckPolicy: js.AckExplicitPolicy, AckWait: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &idemjs.Config{}
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.MaxWait = 100 * time.Millisecond
	c, err := idemjs.NewConsumer(e.in, e.js, cons, e.effect, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) effect(ctx context.Context, tx *sql.Tx, m js.Msg) error {
	id, err := idemjs.ID(m)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, e.rebind(`INSERT INTO effects (id, body) VALUES (?, ?)`), id, string(m.Data()))
	return err
}

// effects counts the rows in effects, and the distinct ids among them.
func (e *env) effects(t *testing.T) (rows, distinct int) {
	t.Helper()
	err := e.l.Driver().DB().QueryRow(`SELECT COUNT(*), COUNT(DISTINCT id) FROM effects`).Scan(&rows, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// runUntil runs c until done reports true (checked every 20ms), at most a
// minute.
func runUntil(t *testing.T, done func() bool, cs ...*idemjs.Consumer) {
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

// Two durable consumers of one stream, recording under one inbox source,
// each get every message: the second delivery of each is a duplicate, and
// every message has exactly one effect.
func TestDuplicateDeliveriesHaveOneEffect(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			const n = 50
			for i := range n {
				e.publish(t, e.stream+".orders", fmt.Sprintf("order-%d", i), fmt.Sprintf(`{"n":%d}`, i))
			}
			a := e.consumer(t, e.stream, "a", &idemjs.Config{Source: "orders"})
			b := e.consumer(t, e.stream, "b", &idemjs.Config{Source: "orders"})
			runUntil(t, func() bool {
				sa, sb := a.Stats(), b.Stats()
				return sa.Processed+sa.Duplicates+sb.Processed+sb.Duplicates == 2*n
			}, a, b)
			if rows, distinct := e.effects(t); rows != n || distinct != n {
				t.Fatalf("%d effects for %d distinct ids, want %d of %d", rows, distinct, n, n)
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.Duplicates+sb.Duplicates != n || sa.Processed+sb.Processed != n {
				t.Fatalf("stats %+v and %+v: want %d processed and %d duplicates in all", sa, sb, n, n)
			}
		})
	}
}

// A message without Nats-Msg-Id is recorded under its stream sequence.
func TestIDFallsBackToStreamSequence(t *testing.T) {
	e := setup(t, "sqlite")
	ack := e.publish(t, e.stream+".x", "", "body")
	c := e.consumer(t, e.stream, "c", nil)
	runUntil(t, func() bool { return c.Stats().Processed == 1 }, c)
	var id string
	if err := e.l.Driver().DB().QueryRow(`SELECT id FROM effects`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("seq:%d", ack.Sequence); id != want {
		t.Fatalf("id %q, want %q", id, want)
	}
}

// The same id with a different payload (here from a second stream feeding
// the same source) is not applied: it goes to the dead-letter subject,
// with the reason, and is counted.
func TestChangedPayloadIsDeadLettered(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			other, dead := e.stream+"B", e.stream+"DLQ"
			e.createStream(t, other)
			e.createStream(t, dead)
			e.publish(t, e.stream+".orders", "order-1", `{"amount":100}`)
			e.publish(t, other+".orders", "order-1", `{"amount":999}`)
			cfg := func() *idemjs.Config { return &idemjs.Config{Source: "orders", DeadLetterSubject: dead + ".orders"} }
			a := e.consumer(t, e.stream, "a", cfg())
			runUntil(t, func() bool { return a.Stats().Processed == 1 }, a)
			b := e.consumer(t, other, "b", cfg())
			runUntil(t, func() bool { return b.Stats().DeadLettered == 1 }, b)
			if rows, _ := e.effects(t); rows != 1 {
				t.Fatalf("%d effects, want 1", rows)
			}
			ctx := context.Background()
			s, err := e.js.Stream(ctx, dead)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetLastMsgForSubject(ctx, dead+".orders")
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Data) != `{"amount":999}` || m.Header.Get(idemjs.HeaderDeadReason) == "" || m.Header.Get(idemjs.HeaderSubject) != other+".orders" {
				t.Fatalf("dead letter %q with headers %v", m.Data, m.Header)
			}
			// Terminated: the message is not redelivered.
			jc, err := e.js.Consumer(ctx, other, "b")
			if err != nil {
				t.Fatal(err)
			}
			info, err := jc.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 0 || info.NumPending != 0 {
				t.Fatalf("consumer still has %d pending, %d unacked", info.NumPending, info.NumAckPending)
			}
		})
	}
}

// A handler error rolls back and the message comes back; after
// MaxAttempts it is dead-lettered.
func TestHandlerErrorRetriesThenDeadLetters(t *testing.T) {
	e := setup(t, "sqlite")
	dead := e.stream + "DLQ"
	e.createStream(t, dead)
	e.publish(t, e.stream+".flaky", "flaky", "f")
	e.publish(t, e.stream+".poison", "poison", "p")
	cons, err := e.js.CreateOrUpdateConsumer(context.Background(), e.stream, js.ConsumerConfig{Durable: "c", AckPolicy: js.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var flaky atomic.Int64
	c, err := idemjs.NewConsumer(e.in, e.js, cons, func(ctx context.Context, tx *sql.Tx, m js.Msg) error {
		if err := e.effect(ctx, tx, m); err != nil {
			return err
		}
		if m.Subject() == e.stream+".poison" || flaky.Add(1) <= 2 {
			return fmt.Errorf("refused")
		}
		return nil
	}, &idemjs.Config{MaxAttempts: 3, RetryDelay: 10 * time.Millisecond, MaxWait: 100 * time.Millisecond,
		DeadLetterSubject: dead + ".x", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, func() bool { s := c.Stats(); return s.Processed == 1 && s.DeadLettered == 1 }, c)
	if s := c.Stats(); s.Failed != 2+3 {
		t.Fatalf("stats %+v: want 5 failures (2 flaky, 3 poison)", s)
	}
	if rows, _ := e.effects(t); rows != 1 {
		t.Fatalf("%d effects, want 1 (rolled back effects must not stay)", rows)
	}
}

func TestNewConsumerRefusesAutoAck(t *testing.T) {
	e := setup(t, "sqlite")
	cons, err := e.js.CreateOrUpdateConsumer(context.Background(), e.stream, js.ConsumerConfig{Durable: "none", AckPolicy: js.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemjs.NewConsumer(e.in, e.js, cons, e.effect, nil); err == nil {
		t.Fatal("a consumer without explicit acks was accepted")
	}
}

// The outbox relay publishes through Publisher with Nats-Msg-Id = the
// message's key: publishing a delivery again (a relay that died after the
// publish) is dropped by the stream, and the consumer applies each once.
func TestOutboxPublisher(t *testing.T) {
	for _, driver := range ledgertest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := setup(t, driver)
			ctx := context.Background()
			pub, err := idemjs.NewPublisher(e.js, e.stream+".out")
			if err != nil {
				t.Fatal(err)
			}
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
			// One delivery published ahead of the relay, as by a relay that
			// died after publishing it.
			if err := pub.Publish(ctx, outbox.Envelope{Key: "m3", Body: []byte(`{"n":3}`)}); err != nil {
				t.Fatal(err)
			}
			if err := ob.Start(ctx); err != nil {
				t.Fatal(err)
			}
			c := e.consumer(t, e.stream, "c", nil)
			runUntil(t, func() bool { return c.Stats().Processed == n }, c)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := ob.Stop(sctx); err != nil {
				t.Fatal(err)
			}
			if rows, distinct := e.effects(t); rows != n || distinct != n {
				t.Fatalf("%d effects for %d ids, want %d", rows, distinct, n)
			}
			s, err := e.js.Stream(ctx, e.stream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != n {
				t.Fatalf("the stream holds %d messages for %d outbox messages", info.State.Msgs, n)
			}
		})
	}
}
