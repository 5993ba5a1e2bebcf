// Command inbox-jetstream moves payments from one service's outbox to
// another's ledger through NATS JetStream, exactly once at each end: the
// outbox relay publishes each message with its id as Nats-Msg-Id (a
// publish repeated after a relay crash is dropped by the stream), and the
// consumer applies each message in one transaction with its inbox record,
// acking only after the commit (a redelivery is a no-op). A second
// consumer group reading the same stream into the same inbox source shows
// redeliveries doing nothing. It needs a nats-server with JetStream
// (nats-server -js), at -nats or $NATS_URL, and exits by itself.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	idemjs "github.com/idemdev/idem/broker/jetstream"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/outbox"
)

func main() {
	url := flag.String("nats", cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL), "NATS server URL")
	flag.Parse()
	if err := run(context.Background(), *url, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "idem-inbox-jetstream-")
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

	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream := fmt.Sprintf("PAYMENTS_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}}); err != nil {
		return err
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), stream)

	// The producing side: payments added to the outbox in the business
	// transaction, published by the relay.
	pub, err := idemjs.NewPublisher(js, stream+".created")
	if err != nil {
		return err
	}
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
	// A relay that died after publishing pay-2 and before recording it
	// publishes it again: the stream drops the copy (same Nats-Msg-Id).
	if err := pub.Publish(ctx, outbox.Envelope{Key: "pay-2", Body: []byte(`{"amount":20}`)}); err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Stop(context.WithoutCancel(ctx))

	// The consuming side.
	in, err := inbox.New(l, nil)
	if err != nil {
		return err
	}
	credit := func(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
		id, err := idemjs.ID(m)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO credits (id, payload) VALUES (?, ?)`, id, string(m.Data()))
		return err
	}
	var stats []idemjs.Stats
	for _, group := range []string{"billing", "billing-replay"} {
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: group, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			return err
		}
		c, err := idemjs.NewConsumer(in, js, cons, credit, &idemjs.Config{Source: "payments", MaxWait: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		cctx, stop := context.WithCancel(ctx)
		go func() {
			for s := c.Stats(); s.Processed+s.Duplicates < 5 && cctx.Err() == nil; s = c.Stats() {
				time.Sleep(20 * time.Millisecond)
			}
			stop()
		}()
		c.Run(cctx)
		stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stats = append(stats, c.Stats())
	}
	var credits int
	if err := l.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM credits`).Scan(&credits); err != nil {
		return err
	}
	fmt.Fprintf(out, "billing: %d applied, %d duplicates\n", stats[0].Processed, stats[0].Duplicates)
	fmt.Fprintf(out, "billing-replay: %d applied, %d duplicates\n", stats[1].Processed, stats[1].Duplicates)
	fmt.Fprintf(out, "credits: %d\n", credits)
	return nil
}
