package prove

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	idemjs "github.com/idemdev/idem/broker/jetstream"
	"github.com/idemdev/idem/broker/rabbitmq"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/brokertest"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/outbox"
)

// The broker redelivery: every operation is a message, published twice
// (a producer's retry) through the broker package's outbox Publisher
// under the operation's key as message id, into a real broker the prover
// starts on loopback. Workers in one competing group consume it through
// the broker package's Consumer, whose effect is a row in the effects
// table. The first workers are armed to die before the commit or after it
// (before the ack); dead workers are replaced; the broker is killed and
// restarted once a third of the messages are consumed. Every message must
// have exactly one effect.
//
// A variant is one brokerVariant: adding a broker is one more.
type brokerVariant struct {
	name string
	// kind is the brokertest server to start ("" if start is set).
	kind string
	// start, when set, starts the broker instead of brokertest (an
	// in-process broker, say); skip says why it cannot ("" if it can).
	start func(ctx context.Context) (brokerServer, error)
	skip  func() string
	// prepare creates the destination dest (a stream and its durable
	// consumer, a queue) on the broker at url.
	prepare func(ctx context.Context, url, dest string) error
	// publisher returns the outbox Publisher into dest, and its closer.
	publisher func(ctx context.Context, url, dest string) (outbox.Publisher, func(), error)
	// pending is how many messages dest has not had acknowledged.
	pending func(ctx context.Context, url, dest string) (int, error)
	// describe, when set, says what the broker holds of dest (for a
	// trial that timed out).
	describe func(ctx context.Context, url, dest string) string
	// consume runs in a worker: it consumes dest into in (source dest)
	// until ctx ends, with effect as each message's effect and settled
	// called after each message was acked or handed back.
	// log receives the consumer's warnings (its reconnects).
	consume func(ctx context.Context, url, dest string, in *inbox.Inbox, source string,
		effect func(ctx context.Context, tx *sql.Tx, id string, payload []byte) error,
		settled func(id string, payload []byte, err error), log *slog.Logger) error
	// run, when set, is the whole trial for this variant instead (Kafka's:
	// no acks, offsets kept in the database; prove/broker_kafka.go).
	run func(ctx context.Context, t *trial) error
}

// brokerServer is a broker the scenario owns.
type brokerServer interface {
	URL() string
	Kill()
	Start(ctx context.Context) error
	Close() error
}

// brokerVariants are the variants of broker-redelivery, in report order.
var brokerVariants = []brokerVariant{jetstreamVariant(), rabbitmqVariant(),
	{name: "kafka", skip: func() string { return "" }, run: runBrokerKafka}} // kfake runs in process: nothing to install

func brokerVariantNames() []string {
	var out []string
	for _, v := range brokerVariants {
		out = append(out, v.name)
	}
	return out
}

func findBrokerVariant(name string) (brokerVariant, bool) {
	i := slices.IndexFunc(brokerVariants, func(v brokerVariant) bool { return v.name == name })
	if i < 0 {
		return brokerVariant{}, false
	}
	return brokerVariants[i], true
}

func skipBroker(_ *runner, variant string) string {
	v, ok := findBrokerVariant(variant)
	switch {
	case !ok:
		return "unknown broker " + variant
	case v.skip != nil:
		return v.skip()
	case os.Getenv(brokertest.RequireEnv) == "1":
		return ""
	}
	if _, ok := brokertest.Available(v.kind); !ok {
		return fmt.Sprintf("no %s server binary installed (set %s=1 to fail instead)", v.kind, brokertest.RequireEnv)
	}
	return ""
}

func runBrokerRedelivery(ctx context.Context, t *trial) error {
	v, _ := findBrokerVariant(t.variant)
	if v.run != nil {
		return v.run(ctx, t)
	}
	t.noLedger = true
	var srv brokerServer
	var err error
	if v.start != nil {
		srv, err = v.start(ctx)
	} else {
		srv, err = brokertest.Start(ctx, v.kind, "")
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", v.name, err)
	}
	defer srv.Close()
	url := srv.URL()
	dest := t.brokerDest()
	if err := v.prepare(ctx, url, dest); err != nil {
		return fmt.Errorf("preparing %s: %w", dest, err)
	}
	pub, closePub, err := v.publisher(ctx, url, dest)
	if err != nil {
		return err
	}
	for range 2 {
		for _, k := range t.shuffled() {
			if err := pub.Publish(ctx, outbox.Envelope{Key: k, Body: request(t.scope, k)}); err != nil {
				closePub()
				return fmt.Errorf("publishing %s: %w", k, err)
			}
		}
	}
	closePub()

	pace := min(200*time.Millisecond, time.Second*time.Duration(t.r.cfg.Workers)/time.Duration(len(t.keys)))
	s := spec{Role: roleBroker, Broker: v.name, BrokerURL: url, BrokerDest: dest, PaceMS: pace.Milliseconds()}
	points := []string{crashpoint.BeforeCommit, crashpoint.AfterCommit}
	var workers []*proc
	crashes := map[*proc]string{}
	killed := map[string]int{}
	armed := 0
	startWorker := func() error {
		crash := ""
		if armed < 2*t.r.cfg.Workers {
			crash = fmt.Sprintf("%s:%d", points[armed%len(points)], 1+t.intN(3))
			armed++
		}
		p, err := t.start(ctx, s, crash)
		if err != nil {
			return err
		}
		workers = append(workers, p)
		crashes[p] = strings.Split(crash, ":")[0]
		return nil
	}
	restarted := false
	for {
		live := workers[:0]
		for _, p := range workers {
			select {
			case <-p.done:
				if err := p.wait(ctx, true); err != nil {
					return err
				}
				if p.killed() {
					killed[crashes[p]]++
				}
			default:
				live = append(live, p)
			}
		}
		workers = live
		for len(workers) < t.r.cfg.Workers {
			if err := startWorker(); err != nil {
				return err
			}
		}
		_, settled, _ := t.h.stats()
		if r, ok := srv.(interface{ Running() bool }); ok && !r.Running() {
			return fmt.Errorf("%s exited on its own with %d of %d messages consumed\n%s", v.name, settled, len(t.keys), brokerState(v, srv, url, dest, workers))
		}
		if !restarted && settled >= len(t.keys)/3 {
			restarted = true
			boots := classicBoots(srv)
			srv.Kill()
			if err := srv.Start(ctx); err != nil {
				return fmt.Errorf("restarting %s: %w", v.name, err)
			}
			// A broker that came back without dest (RabbitMQ 3.10 under
			// load, now and then) has lost its messages: say so now, not
			// at the deadline. A consumer that reconnected first has
			// declared dest again, empty, so the broker's own account of
			// the queues it recovered is the one to go by.
			lost := func(why string) error {
				return inconclusive{fmt.Sprintf("%s lost its durable queue %s and the messages in it in the SIGKILL restart (%d of %d consumed before): a broker fault, so nothing can be concluded (%s)",
					v.name, dest, settled, len(t.keys), why)}
			}
			if n, ok := recoveredAfter(ctx, srv, boots); ok && n == 0 {
				return lost("its log: it recovered 0 classic queues")
			}
			if _, err := v.pending(ctx, url, dest); err != nil && strings.Contains(err.Error(), "NOT_FOUND") {
				return lost(err.Error())
			}
		}
		if settled == len(t.keys) {
			if n, err := v.pending(ctx, url, dest); err == nil && n == 0 {
				break
			}
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("%d of %d messages consumed: %w\n%s", settled, len(t.keys), err, brokerState(v, srv, url, dest, workers))
		}
	}
	t.note("consumers SIGKILLed: %d %s, %d %s (before the ack); %s killed and restarted mid-run: %v",
		killed[crashpoint.BeforeCommit], crashpoint.BeforeCommit, killed[crashpoint.AfterCommit], crashpoint.AfterCommit, v.name, restarted)
	if !restarted {
		t.note("the messages were consumed before a third was acknowledged; the broker restart came after them (raise --ops)")
	}
	var errs []error
	for _, p := range workers {
		p.stdin.Close() // stop
	}
	for _, p := range workers {
		errs = append(errs, p.wait(ctx, true))
	}
	return errors.Join(errs...)
}

// classicRecoverer is a broker whose log accounts for the classic queues
// each boot recovered (brokertest.Server, for RabbitMQ).
type classicRecoverer interface{ ClassicRecoveries() (boots, last int) }

// classicBoots is how many boots srv's log accounts for: 0 for a broker
// whose log says nothing of it (NATS).
func classicBoots(srv brokerServer) int {
	if rec, ok := srv.(classicRecoverer); ok {
		boots, _ := rec.ClassicRecoveries()
		return boots
	}
	return 0
}

// recoveredAfter waits, for at most 10 s, for srv's log to account for a
// boot after the first boots, and returns how many classic queues that
// boot recovered; ok is false if the log does not say (or never did).
func recoveredAfter(ctx context.Context, srv brokerServer, boots int) (n int, ok bool) {
	rec, can := srv.(classicRecoverer)
	if !can || boots == 0 {
		return 0, false
	}
	for range 100 {
		if b, last := rec.ClassicRecoveries(); b > boots {
			return last, true
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	return 0, false
}

// brokerState says, for a trial that timed out, what the broker holds of
// dest, the end of the broker's log, and the end of each live worker's
// stderr (where its consumer logs its reconnects).
func brokerState(v brokerVariant, srv brokerServer, url, dest string, workers []*proc) string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, ok := srv.(interface{ Running() bool }); ok {
		fmt.Fprintf(&b, "%s process running: %v\n", v.name, r.Running())
	}
	if v.describe != nil {
		fmt.Fprintf(&b, "%s %s: %s\n", v.name, dest, v.describe(ctx, url, dest))
	}
	if l, ok := srv.(interface{ LogErrors(int) string }); ok {
		fmt.Fprintf(&b, "%s log, errors (last 40):\n%s\n", v.name, l.LogErrors(40))
	}
	if l, ok := srv.(interface{ LogTail(int) string }); ok {
		fmt.Fprintf(&b, "%s log (last 30 lines):\n%s\n", v.name, l.LogTail(30))
	}
	for _, p := range workers {
		fmt.Fprintf(&b, "worker %d stderr:\n%s\n", p.pid, p.stderr)
	}
	return b.String()
}

// runBroker is a consuming worker: it consumes until stdin ends. Each
// message settled is reported as an attempt at its key that returned the
// payload. With NoGuard every worker records under a source of its own, so
// that a message redelivered to another worker is applied again.
func (w *worker) runBroker(ctx context.Context) error {
	v, ok := findBrokerVariant(w.s.Broker)
	if !ok {
		return fmt.Errorf("unknown broker %q", w.s.Broker)
	}
	in, err := inbox.New(w.l, &inbox.Config{Logger: slog.New(slog.NewTextHandler(w.stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return err
	}
	source := w.s.BrokerDest
	if w.s.NoGuard {
		source = fmt.Sprintf("%s-%d", source, os.Getpid())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, w.in)
		cancel()
	}()
	effect := func(ctx context.Context, tx *sql.Tx, id string, payload []byte) error {
		time.Sleep(time.Duration(w.s.PaceMS) * time.Millisecond)
		return insertEffect(ctx, tx, w.rebind, w.s.Scope, id, string(payload))
	}
	settled := func(id string, payload []byte, err error) {
		w.out.emit(wireEvent{Ev: evInvoke, Key: id})
		if err != nil {
			w.out.emit(wireEvent{Ev: evUnknown, Key: id, Err: err.Error()})
			return
		}
		w.out.emit(wireEvent{Ev: evOK, Key: id, Body: string(payload)})
	}
	log := slog.New(slog.NewTextHandler(w.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return v.consume(ctx, w.s.BrokerURL, w.s.BrokerDest, in, source, effect, settled, log)
}

const brokerGroup = "idem-prove"

func jetstreamVariant() brokerVariant {
	connect := func(url string) (*nats.Conn, js.JetStream, error) {
		// A worker may start while the server restarts: keep trying.
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			return nil, nil, err
		}
		j, err := js.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, j, nil
	}
	return brokerVariant{
		name: "jetstream", kind: brokertest.NATS,
		prepare: func(ctx context.Context, url, dest string) error {
			nc, j, err := connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			if _, err := j.CreateStream(ctx, js.StreamConfig{Name: dest, Subjects: []string{dest + ".>"}}); err != nil {
				return err
			}
			_, err = j.CreateOrUpdateConsumer(ctx, dest, js.ConsumerConfig{
				Durable: brokerGroup, AckPolicy: js.AckExplicitPolicy, AckWait: time.Second,
			})
			return err
		},
		publisher: func(ctx context.Context, url, dest string) (outbox.Publisher, func(), error) {
			nc, j, err := connect(url)
			if err != nil {
				return nil, nil, err
			}
			p, err := idemjs.NewPublisher(j, dest+".ops")
			return p, nc.Close, err
		},
		pending: func(ctx context.Context, url, dest string) (int, error) {
			nc, j, err := connect(url)
			if err != nil {
				return 0, err
			}
			defer nc.Close()
			c, err := j.Consumer(ctx, dest, brokerGroup)
			if err != nil {
				return 0, err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int(info.NumPending) + info.NumAckPending, nil
		},
		consume: func(ctx context.Context, url, dest string, in *inbox.Inbox, source string,
			effect func(context.Context, *sql.Tx, string, []byte) error, settled func(string, []byte, error), log *slog.Logger) error {
			nc, j, err := connect(url)
			if err != nil {
				return err
			}
			defer nc.Close()
			var cons js.Consumer
			for cons, err = j.Consumer(ctx, dest, brokerGroup); err != nil && ctx.Err() == nil; cons, err = j.Consumer(ctx, dest, brokerGroup) {
				time.Sleep(50 * time.Millisecond) // the broker is restarting
			}
			if err != nil {
				return nil // stopped
			}
			c, err := idemjs.NewConsumer(in, j, cons, func(ctx context.Context, tx *sql.Tx, m js.Msg) error {
				id, err := idemjs.ID(m)
				if err != nil {
					return err
				}
				return effect(ctx, tx, id, m.Data())
			}, &idemjs.Config{
				Source: source, MaxAttempts: -1, RetryDelay: 50 * time.Millisecond, MaxWait: 200 * time.Millisecond, Batch: 10,
				Logger:  log,
				Observe: func(s idemjs.Settled) { settled(s.ID, s.Payload, s.Err) },
			})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}
}

func rabbitmqVariant() brokerVariant {
	dialer := func(url string) rabbitmq.Dialer { return func() (*amqp.Connection, error) { return amqp.Dial(url) } }
	return brokerVariant{
		name: "rabbitmq", kind: brokertest.RabbitMQ,
		prepare: func(ctx context.Context, url, dest string) error {
			// A classic durable queue. RabbitMQ 3.10 under load now and
			// then brings it back from a SIGKILL without the queue (the
			// trial then ends inconclusive); a quorum queue was tried and
			// now and then came back with no leader, consuming nothing.
			return brokertest.RabbitChannel(url, func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclare(dest, true, false, false, false, nil)
				return err
			})
		},

		publisher: func(ctx context.Context, url, dest string) (outbox.Publisher, func(), error) {
			p, err := rabbitmq.NewPublisher(dialer(url), &rabbitmq.PublisherConfig{RoutingKey: dest})
			if err != nil {
				return nil, nil, err
			}
			return p, func() { p.Close() }, nil
		},
		pending: func(ctx context.Context, url, dest string) (n int, err error) {
			err = brokertest.RabbitChannel(url, func(ch *amqp.Channel) error {
				q, err := ch.QueueDeclarePassive(dest, true, false, false, false, nil)
				n = q.Messages // ready; unacked ones come back if their consumer dies
				return err
			})
			return n, err
		},

		describe: func(ctx context.Context, url, dest string) string {
			return brokertest.RabbitQueueState(url, dest)
		},
		consume: func(ctx context.Context, url, dest string, in *inbox.Inbox, source string,
			effect func(context.Context, *sql.Tx, string, []byte) error, settled func(string, []byte, error), log *slog.Logger) error {
			c, err := rabbitmq.NewConsumer(in, dialer(url), func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
				return effect(ctx, tx, d.MessageId, d.Body)
			}, &rabbitmq.Config{
				Queue: dest, Source: source, Prefetch: 10, MaxAttempts: -1, RetryDelay: 50 * time.Millisecond,
				Logger:  log,
				Observe: func(s rabbitmq.Settled) { settled(s.ID, s.Payload, s.Err) },
			})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}
}

// brokerDest names the trial's stream, queue or topic on its broker. It is
// also the inbox's source, whose message IDs repeat from one attempt to
// the next: an attempt after an inconclusive one gets a name of its own,
// or its messages would meet the inbox records of the first attempt's,
// whose payloads (in another scope) differ, and be dead-lettered.
func (t *trial) brokerDest() string {
	dest := "idemprove" + strings.NewReplacer("-", "", "/", "").Replace(t.r.runID+t.variant)
	if t.attempt > 1 {
		dest += fmt.Sprintf("a%d", t.attempt)
	}
	return dest
}
