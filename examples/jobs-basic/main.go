// Command jobs-basic enqueues a follow-up job in the same transaction as a
// business write, refuses a duplicate enqueue, and runs the job with its
// effect committed together with its completion. It runs on a temporary
// SQLite file and exits by itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// SendReceipt is a typed job: its arguments are stored as JSON.
type SendReceipt struct {
	OrderID string `json:"order_id"`
}

// Kind names the job type; it must work on the zero value.
func (SendReceipt) Kind() string { return "send_receipt" }

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idem-jobs-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		return err
	}
	defer l.Close()

	var attempts atomic.Int32
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[SendReceipt]) error {
		if attempts.Add(1) == 1 {
			return errors.New("mail server busy") // retried after backoff
		}
		tx, err := j.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// The effect and the completion commit together: a crash before the
		// commit leaves neither, and the job runs again.
		if _, err := tx.ExecContext(ctx, `INSERT INTO receipts (order_id) VALUES (?)`, j.Args.OrderID); err != nil {
			return err
		}
		if err := j.CompleteTx(ctx, tx); err != nil {
			return err // jobs.ErrLeaseLost: another worker owns the job now
		}
		return tx.Commit()
	}))
	c, err := jobs.New(l, &jobs.Config{
		Workers: ws,
		Queues:  map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: 4}},
		Backoff: func(int) time.Duration { return 100 * time.Millisecond },
	})
	if err != nil {
		return err
	}
	if _, err := c.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY);
		CREATE TABLE receipts (order_id TEXT NOT NULL)`); err != nil {
		return err
	}

	// The order and its follow-up job commit in one transaction.
	tx, err := c.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('order-42')`); err != nil {
		return err
	}
	first, err := c.EnqueueTx(ctx, tx, SendReceipt{OrderID: "order-42"}, &jobs.EnqueueOpts{UniqueKey: "receipt/order-42"})
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// A producer that enqueues twice (a retried request) gets the first job.
	again, err := c.Enqueue(ctx, SendReceipt{OrderID: "order-42"}, &jobs.EnqueueOpts{UniqueKey: "receipt/order-42"})
	if err != nil {
		return err
	}
	fmt.Printf("enqueued job %d; second enqueue: duplicate=%v, job %d\n", first.Job.ID, again.Duplicate, again.Job.ID)

	if err := c.Start(ctx); err != nil {
		return err
	}
	var done *idemtype.JobRow
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if done, err = c.Get(ctx, first.Job.ID); err != nil {
			return err
		}
		if done.State == idemtype.JobCompleted {
			break
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		return err
	}
	var receipts int
	if err := c.DB().QueryRowContext(ctx, `SELECT count(*) FROM receipts`).Scan(&receipts); err != nil {
		return err
	}
	fmt.Printf("job %d: %s after %d attempts (first error: %q); receipts written: %d\n",
		done.ID, done.State, done.Attempt, done.Errors[0].Error, receipts)
	return nil
}
