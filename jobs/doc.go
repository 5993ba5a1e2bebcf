// Package jobs is a leased job queue on the ledger's database (SQLite or
// PostgreSQL): enqueue with an optional unique key, claim in batches under
// a lease with a fencing token, heartbeat while working, complete in the
// handler's own transaction, retry with backoff, dead-letter when out of
// attempts. Nothing is ever dropped. Jobs have a priority within their
// queue (EnqueueOpts.Priority, 1 highest … 4); a handler can put its job
// back without spending an attempt (Snooze); Client.Cancel stops a job
// from running or from completing.
//
//	ws := jobs.NewWorkers()
//	jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[SendEmail]) error {
//		tx, err := j.DB().BeginTx(ctx, nil)
//		if err != nil {
//			return err
//		}
//		defer tx.Rollback()
//		// … write the effect with tx …
//		if err := j.CompleteTx(ctx, tx); err != nil {
//			return err // jobs.ErrLeaseLost: another worker owns the job now
//		}
//		return tx.Commit()
//	}))
//	c, err := jobs.New(l, &jobs.Config{Workers: ws, Queues: map[string]jobs.QueueConfig{"default": {MaxWorkers: 8}}})
//	c.Start(ctx)
//	c.Enqueue(ctx, SendEmail{To: "a@example.com"}, &jobs.EnqueueOpts{UniqueKey: "welcome/42"})
//
// # Guarantees
//
// Delivery is at least once: a job runs until one run of it completes, and
// a worker that dies or pauses past its lease has its job re-claimed. The
// effect is exactly once when the handler writes it in the transaction it
// passes to CompleteTx: the effect and the completion commit together, and
// a stale worker (one whose lease was taken over) cannot complete, because
// every claim bumps the job's attempt, the fencing token that every
// completion checks inside its UPDATE. An effect outside the database
// (an HTTP call) is exactly once only if the receiver honours a key the
// handler derives from the job (its ID or UniqueKey).
//
// docs/jobs.md has the full contract: what happens on a crash at each step,
// and how to tune the lease, heartbeats and polling.
package jobs
