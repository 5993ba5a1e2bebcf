package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/idemdev/idem/jobs"
)

// bulkBatch is how many jobs one bulk-insert operation inserts.
const bulkBatch = 100

// bulkRow: jobs.Client.EnqueueManyFast (COPY on PostgreSQL, multi-row
// INSERTs on SQLite) against the hand-written enqueue INSERT run once per
// job, bulkBatch jobs per transaction. Rates and latencies are per batch;
// the ratio is the same per job.
func (r *runner) bulkRow(ctx context.Context, c int) (Result, error) {
	idemL, idemQueue, done, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer done()
	client, err := jobs.New(idemL, &jobs.Config{Logger: quiet, Queues: map[string]jobs.QueueConfig{idemQueue: {}}})
	if err != nil {
		return Result{}, err
	}
	params := make([]jobs.EnqueueParams, bulkBatch)
	for i := range params {
		params[i] = jobs.EnqueueParams{Args: benchArgs{N: i}, Opts: &jobs.EnqueueOpts{Queue: idemQueue}}
	}
	idemOp := one(func(ctx context.Context, w int, seq int64) error {
		ids, err := client.EnqueueManyFast(ctx, params)
		if err == nil && len(ids) != bulkBatch {
			err = fmt.Errorf("bulk insert returned %d ids for %d jobs: %w", len(ids), bulkBatch, errUnexpected)
		}
		return err
	})
	handL, handQueue, done, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer done()
	handOp := handBulk(r.handDB(handL), handL.Driver().Name(), handQueue)
	return r.medianRun(func(int) (Result, error) {
		r.progress("jobs bulk insert of %d, %s: idem, hand-written SQL", bulkBatch, callers(c))
		st, err := compare(ctx, c, r.o.Duration, side{name: "idem", op: idemOp}, side{name: "baseline", op: handOp})
		if err != nil {
			return Result{}, fmt.Errorf("bulk insert, %s: %w", callers(c), err)
		}
		return newResult(GroupJobs, "jobs bulk insert", "hand-written INSERT per job, 100 per transaction",
			r.db, c, r.o.Duration, st[0], st[1], true), nil
	})
}

// handBulk inserts bulkBatch jobs with the hand-written enqueue statement,
// in one transaction.
func handBulk(db *sql.DB, drv, queue string) opFunc {
	q := handJobSQL[drv].enqueue
	return one(func(ctx context.Context, w int, seq int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		stmt, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := time.Now().UnixMilli()
		for i := range bulkBatch {
			args := []byte(`{"n":` + strconv.Itoa(i) + `}`)
			var id int64
			if drv == "sqlite" {
				err = stmt.QueryRowContext(ctx, queue, args, now).Scan(&id)
			} else {
				err = stmt.QueryRowContext(ctx, queue, args).Scan(&id)
			}
			if err != nil {
				return err
			}
		}
		return tx.Commit()
	})
}
