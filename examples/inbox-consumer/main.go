// Command inbox-consumer consumes a stream that redelivers messages (as
// Kafka does after a rebalance, or SQS after a visibility timeout): each
// message's effect, its inbox record and the consumer's offset commit in
// one transaction, so a redelivery is a no-op and a restart resumes at the
// stored offset. A redelivery with a changed payload is refused. It runs on
// a temporary SQLite file and exits by itself.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/inbox"
)

type message struct {
	offset  int64
	id      string
	payload string
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idem-inbox-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		return err
	}
	defer l.Close()
	in, err := inbox.New(l, nil)
	if err != nil {
		return err
	}
	if _, err := in.DB().ExecContext(ctx, `CREATE TABLE credits (account TEXT NOT NULL, amount INTEGER NOT NULL);
		CREATE TABLE offsets (partition INTEGER PRIMARY KEY, next INTEGER NOT NULL);
		INSERT INTO offsets VALUES (0, 0)`); err != nil {
		return err
	}

	stream := []message{
		{0, "pay-1", `{"account":"a","amount":10}`},
		{1, "pay-2", `{"account":"b","amount":20}`},
		{1, "pay-2", `{"account":"b","amount":20}`}, // redelivered
		{2, "pay-3", `{"account":"a","amount":5}`},
		{0, "pay-1", `{"account":"a","amount":10}`}, // replay from an old offset
	}
	applied, dups := 0, 0
	for _, m := range stream {
		dup, err := in.Process(ctx, "payments", m.id, []byte(m.payload), func(tx *sql.Tx) error {
			// The effect…
			if _, err := tx.ExecContext(ctx, `INSERT INTO credits (account, amount)
				VALUES (json_extract(?1, '$.account'), json_extract(?1, '$.amount'))`, m.payload); err != nil {
				return err
			}
			// …and the consumer's position, in the same transaction.
			_, err := tx.ExecContext(ctx, `UPDATE offsets SET next = max(next, ?) WHERE partition = 0`, m.offset+1)
			return err
		})
		if err != nil {
			return err
		}
		if dup {
			dups++
		} else {
			applied++
		}
	}
	_, err = in.Process(ctx, "payments", "pay-2", []byte(`{"account":"b","amount":2000}`), func(*sql.Tx) error { return nil })
	fmt.Printf("changed payload under a known id refused: %v (matches idem.ErrMismatch: %v)\n", err != nil, errors.Is(err, idem.ErrMismatch))

	var total, next int
	if err := in.DB().QueryRowContext(ctx, `SELECT coalesce(sum(amount), 0), (SELECT next FROM offsets) FROM credits`).Scan(&total, &next); err != nil {
		return err
	}
	fmt.Printf("%d deliveries: %d applied, %d duplicates; credited %d in total; resume at offset %d\n",
		len(stream), applied, dups, total, next)
	return nil
}
