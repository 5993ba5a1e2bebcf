package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/groupcommit"
)

// DefaultMaxBatch is the most ledger writes one group commit holds. Past a
// few dozen the fsync is no longer what a batch waits for; 128 keeps a
// batch's transaction (which holds the only writer) around a millisecond.
const DefaultMaxBatch = 128

// batchWait is the longest a batch waits for the callers of the previous
// one to come back (see groupcommit.New).
const batchWait = 200 * time.Microsecond

// Group commit on SQLite: one goroutine takes the writer connection for a
// batch, runs every write of the batch in one BEGIN IMMEDIATE transaction
// and commits once, so N concurrent callers pay one fsync instead of N and
// queue in Go instead of spinning on busy_timeout. It does not keep the
// connection between batches: user transactions (Do, CompleteTx, ClaimTx,
// jobs' EnqueueTx) share it. A write submitted while no other is in flight,
// and a batch of one, is written as before, in its own autocommit
// statement, so a lone caller waits for nobody.

// commitBatch writes a batch in one transaction and answers every caller
// after the commit. A write whose statement fails rolls the batch back;
// then every write runs again on its own, so the failure reaches only the
// caller whose statement it was. Statements do not run under a caller's
// context: one caller going away must not interrupt the others' batch.
func (d *Driver) commitBatch(batch []*groupcommit.Write) {
	ctx := context.Background()
	batch = groupcommit.Live(batch)
	switch len(batch) {
	case 0:
		return
	case 1:
		batch[0].Answer(batch[0].RunOn(ctx, d.w))
		return
	}
	tx, err := d.w.begin(ctx) // BEGIN IMMEDIATE
	if err != nil {
		err = fmt.Errorf("group commit: begin: %w", err)
		for _, w := range batch {
			w.Answer(err)
		}
		return
	}
	failed := false
	for _, w := range batch {
		if err := w.RunOn(ctx, tx); err != nil {
			failed = true
			break
		}
	}
	crashpoint.Hit(crashpoint.MidBatch)
	if failed {
		tx.Rollback()
		for _, w := range batch {
			w.Answer(w.RunOn(ctx, d.w))
		}
		return
	}
	if err := tx.Commit(); err != nil {
		err = fmt.Errorf("group commit of %d writes: %w; retry with the same key: %w", len(batch), driver.ErrOutcomeUnknown, err)
		for _, w := range batch {
			w.Answer(err)
		}
		return
	}
	for _, w := range batch {
		w.Answer(nil)
	}
}
