// Command inbox-rabbitmq moves payments from one service's outbox to
// another's ledger through RabbitMQ, exactly once at each end: the outbox
// relay publishes each message persistent, with its id as message-id, and
// waits for the broker's confirm; the consumer applies each delivery in
// one transaction with its inbox record, acking only after the commit.
// RabbitMQ does not deduplicate, so a publish repeated after a relay crash
// reaches the queue twice; the inbox applies it once. A message-id reused
// with another payload goes to the queue's dead-letter exchange. It needs
// a rabbitmq-server at -amqp or $AMQP_URL, and exits by itself.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemdev/idem/broker/rabbitmq"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/outbox"
)

func main() {
	url := flag.String("amqp", cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@localhost:5672/"), "RabbitMQ URL")
	flag.Parse()
	if err := run(context.Background(), *url, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "idem-inbox-rabbitmq-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// One SQLite file plays both services' databases.
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE credits (id TEXT NOT NULL, payload TEXT NOT NULL)`); err != nil {
		return err
	}

	dial := func() (*amqp.Connection, error) { return amqp.Dial(url) }
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	queue := fmt.Sprintf("payments-%d", time.Now().UnixNano())
	// The queue dead-letters what the consumer rejects into queue.dead.
	if _, err := ch.QueueDeclare(queue+".dead", false, true, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, true, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue + ".dead",
	}); err != nil {
		return err
	}

	// The producing side: payments added to the outbox in the business
	// transaction, published by the relay with confirms.
	pub, err := rabbitmq.NewPublisher(dial, &rabbitmq.PublisherConfig{RoutingKey: queue})
	if err != nil {
		return err
	}
	defer pub.Close()
	ob, err := outbox.New(l, &outbox.Config{Publisher: pub, PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	for i := 1; i <= 5; i++ {
		tx, err := ob.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		// … the business write, with tx …
		if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprintf("pay-%d", i), Body: fmt.Appendf(nil, `{"amount":%d}`, 10*i)}); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	// A relay that died after the confirm of pay-2, before recording it,
	// publishes it again; and a buggy producer reuses pay-3's id.
	for _, e := range []outbox.Envelope{{Key: "pay-2", Body: []byte(`{"amount":20}`)}, {Key: "pay-3", Body: []byte(`{"amount":9999}`)}} {
		if err := pub.Publish(ctx, e); err != nil {
			return err
		}
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Stop(context.WithoutCancel(ctx))

	// The consuming side.
	in, err := inbox.New(l, &inbox.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	c, err := rabbitmq.NewConsumer(in, dial, func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO credits (id, payload) VALUES (?, ?)`, d.MessageId, string(d.Body))
		return err
	}, &rabbitmq.Config{Queue: queue, Source: "payments", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	cctx, stop := context.WithCancel(ctx)
	go func() {
		for s := c.Stats(); s.Processed+s.Duplicates+s.DeadLettered < 7 && cctx.Err() == nil; s = c.Stats() {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
	}()
	c.Run(cctx)
	stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s := c.Stats()
	var credits int
	if err := l.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM credits`).Scan(&credits); err != nil {
		return err
	}
	dead, err := ch.QueueDeclarePassive(queue+".dead", false, true, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "payments: %d applied, %d duplicates, %d dead-lettered\n", s.Processed, s.Duplicates, s.DeadLettered)
	fmt.Fprintf(out, "credits: %d, in %s.dead: %d\n", credits, "payments", dead.Messages)
	return nil
}
