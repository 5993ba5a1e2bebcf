// Command pgx shows idem on an application's own pgx pool: the order row,
// the idempotency record and the confirmation job commit in one pgx.Tx, or
// none of them do.
//
//	go run ./examples/bring-your-own-pool/pgx postgres://localhost/shop
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/jobs"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: pgx POSTGRES_URL")
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

// errAbandon makes placeOrder roll its transaction back after every write.
var errAbandon = errors.New("abandoned before commit")

func run(ctx context.Context, url string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url) // the application's pool, as it already has one
	if err != nil {
		return err
	}
	defer pool.Close()
	l, err := idem.New(ctx, postgres.New(pool, nil), nil)
	if err != nil {
		return err
	}
	defer l.Close() // leaves the pool open: it is the application's
	q, err := jobs.New(l, nil)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount BIGINT NOT NULL)`); err != nil {
		return err
	}

	for _, o := range []struct {
		id     string
		amount int64
		commit bool
	}{{"order-1", 1000, true}, {"order-1", 1000, true}, {"order-2", 2500, false}} {
		err := placeOrder(ctx, pool, l, q, o.id, o.amount, o.commit)
		fmt.Fprintf(out, "place %s (commit=%v): %v\n", o.id, o.commit, errText(err))
	}

	var orders, records, queued int
	pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE scope = 'shop'`).Scan(&records)
	pool.QueryRow(ctx, `SELECT count(*) FROM idem_jobs WHERE kind = 'confirm'`).Scan(&queued)
	fmt.Fprintf(out, "orders=%d records=%d jobs=%d\n", orders, records, queued)
	return nil
}

// placeOrder writes the order, claims its key and completes it, and
// enqueues the confirmation, all in one pgx.Tx. A retry of a committed
// order finds the key done and writes nothing.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, l *idem.Ledger, q *jobs.Client, id string, amount int64, commit bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	op := idem.Op{Scope: "shop", Key: id, Fingerprint: fmt.Sprintf("amount=%d", amount)}
	c, err := l.ClaimTx(ctx, tx, op)
	if err != nil {
		return err
	}
	if !c.Outcome.Held() {
		return fmt.Errorf("already %s", c.Outcome)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, id, amount); err != nil {
		return err
	}
	if _, err := q.EnqueueTx(ctx, tx, Confirm{Order: id}, &jobs.EnqueueOpts{UniqueKey: id}); err != nil {
		return err
	}
	if err := l.CompleteTx(ctx, tx, c, idem.Result{Status: 201, Body: []byte(id)}); err != nil {
		return err
	}
	if !commit {
		return errAbandon // the deferred Rollback undoes all three writes
	}
	return tx.Commit(ctx)
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
