// Command sqlite shows idem on an application's own *sql.DB on SQLite, in
// pure Go (modernc.org/sqlite): the order row, the idempotency record and
// the confirmation job commit in one *sql.Tx, or none of them do.
//
//	go run ./examples/bring-your-own-pool/sqlite shop.db
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/sqlite"
	"github.com/idemdev/idem/jobs"
	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: sqlite FILE")
	}
	if err := run(context.Background(), os.Args[1], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Confirm is the job that e-mails an order's confirmation.
type Confirm struct {
	Order string `json:"order"`
}

// Kind names the job.
func (Confirm) Kind() string { return "confirm" }

var errAbandon = errors.New("abandoned before commit")

func run(ctx context.Context, path string, out io.Writer) error {
	// The application's pool. _txlock=immediate makes its transactions take
	// SQLite's write lock at BEGIN, so they never fail with SQLITE_BUSY
	// after reading; busy_timeout lets them wait for idem's writer.
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := idem.New(ctx, sqlite.New(db, nil), nil)
	if err != nil {
		return err
	}
	defer l.Close() // leaves db open: it is the application's
	q, err := jobs.New(l, nil)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		return err
	}
	for _, o := range []struct {
		id     string
		amount int64
		commit bool
	}{{"order-1", 1000, true}, {"order-1", 1000, true}, {"order-2", 2500, false}} {
		err := placeOrder(ctx, db, l, q, o.id, o.amount, o.commit)
		fmt.Fprintf(out, "place %s (commit=%v): %v\n", o.id, o.commit, errText(err))
	}
	var orders, records, queued int
	db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	db.QueryRowContext(ctx, `SELECT count(*) FROM idem_keys WHERE scope = 'shop'`).Scan(&records)
	db.QueryRowContext(ctx, `SELECT count(*) FROM idem_jobs WHERE kind = 'confirm'`).Scan(&queued)
	fmt.Fprintf(out, "orders=%d records=%d jobs=%d\n", orders, records, queued)
	return nil
}

// placeOrder writes the order, claims and completes its key, and enqueues
// the confirmation, all in one *sql.Tx on the application's pool.
func placeOrder(ctx context.Context, db *sql.DB, l *idem.Ledger, q *jobs.Client, id string, amount int64, commit bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	op := idem.Op{Scope: "shop", Key: id, Fingerprint: fmt.Sprintf("amount=%d", amount)}
	c, err := l.ClaimTx(ctx, tx, op)
	if err != nil {
		return err
	}
	if !c.Outcome.Held() {
		return fmt.Errorf("already %s", c.Outcome)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, id, amount); err != nil {
		return err
	}
	if _, err := q.EnqueueTx(ctx, tx, Confirm{Order: id}, &jobs.EnqueueOpts{UniqueKey: id}); err != nil {
		return err
	}
	if err := l.CompleteTx(ctx, tx, c, idem.Result{Status: 201, Body: []byte(id)}); err != nil {
		return err
	}
	if !commit {
		return errAbandon
	}
	return tx.Commit()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
