// Command inbox-kafka publishes messages to Kafka through the outbox and
// consumes them exactly once with broker/kafka: each record's effect, its
// inbox row and the partition's next offset commit in one transaction. A
// record published twice (as by a relay that died after Kafka accepted it)
// has one effect, and a second consumer run resumes at the stored offsets.
//
// Kafka is kfake, franz-go's in-process cluster on loopback, unless -seeds
// names real brokers; the database is a temporary SQLite file unless -db
// names one. It exits by itself.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem/broker/kafka"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/outbox"
)

func main() {
	seeds := flag.String("seeds", "", "Kafka brokers, comma-separated (default: an in-process kfake cluster)")
	db := flag.String("db", "", "database URL (default: a temporary SQLite file)")
	flag.Parse()
	if err := run(os.Stdout, *seeds, *db); err != nil {
		log.Fatal(err)
	}
}

const topic = "payments"

func run(w io.Writer, seeds, db string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if seeds == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
		if err != nil {
			return err
		}
		defer c.Close()
		seeds = strings.Join(c.ListenAddrs(), ",")
	}
	if db == "" {
		dir, err := os.MkdirTemp("", "idem-inbox-kafka-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = "sqlite:" + filepath.Join(dir, "idem.db")
	}
	l, err := dburl.Open(ctx, db, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS credits (payment TEXT NOT NULL, amount TEXT NOT NULL)`); err != nil {
		return err
	}
	brokers := strings.Split(seeds, ",")
	insert := `INSERT INTO credits (payment, amount) VALUES (?, ?)`
	if l.Driver().Name() == "postgres" {
		insert = `INSERT INTO credits (payment, amount) VALUES ($1, $2)`
	}

	// Produce: three messages through the outbox, in one business
	// transaction; the relay publishes them with their ids.
	pub, err := kafka.NewPublisher(&kafka.PublisherConfig{Seeds: brokers, Topic: topic})
	if err != nil {
		return err
	}
	defer pub.Close()
	ob, err := outbox.New(l, &outbox.Config{Publisher: pub, PollInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i, amount := range []string{"10", "20", "5"} {
		if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprintf("pay-%d", i+1), Body: []byte(amount)}); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Stop(context.Background())
	// What a relay that died after publishing pay-2 leaves behind: the
	// record twice in the log, with one id.
	if err := pub.Publish(ctx, outbox.Envelope{Key: "pay-2", Body: []byte("20")}); err != nil {
		return err
	}

	// Consume: stop after 4 records (3 messages and the repeat).
	consume := func(want int) (kafka.Stats, error) {
		cctx, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		seen := 0
		c, err := kafka.NewConsumer(l, &kafka.Config{
			Seeds: brokers, Group: "credits", Topics: []string{topic},
			ID: kafka.HeaderID(kafka.IDHeader),
			OnCommit: func(cs []kafka.Committed) {
				if seen += len(cs); seen >= want {
					stop()
				}
			},
		}, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
			_, err := tx.ExecContext(ctx, insert, string(r.Key), string(r.Value))
			return err
		})
		if err != nil {
			return kafka.Stats{}, err
		}
		err = c.Run(cctx)
		return c.Stats(), err
	}
	st, err := consume(4)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first run: %d applied, %d duplicate\n", st.Processed, st.Duplicates)
	// A second run resumes at the stored offsets: nothing is read again
	// (it gives up after a few seconds of nothing).
	st, err = consume(1)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "second run: %d applied, %d duplicate\n", st.Processed, st.Duplicates)
	var n int
	var total float64
	if err := l.DB().QueryRowContext(ctx, `SELECT count(*), coalesce(sum(CAST(amount AS REAL)), 0) FROM credits`).Scan(&n, &total); err != nil {
		return err
	}
	fmt.Fprintf(w, "credits: %d rows, total %g\n", n, total)
	return nil
}
