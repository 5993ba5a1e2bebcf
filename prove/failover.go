package prove

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
)

// Failover variants: the standby is synchronous (the promise holds) or
// asynchronous (acknowledged commits can be lost, and must be detected).
const (
	failoverSync  = "sync"
	failoverAsync = "async"
)

func skipFailover(r *runner) string {
	switch {
	case r.db.driver != "postgres":
		return "PostgreSQL only: SQLite has no standby"
	case r.db.cluster == nil:
		return "needs clusters the prover starts (--db postgres); it does not fail over yours"
	case runtime.GOOS != "linux":
		return "needs Linux: killing a server with all its processes reads /proc"
	}
	return ""
}

// runFailover runs half the operations through ledger workers (Ledger.Do,
// the effect in the done mark's transaction) and half as jobs (two
// enqueues each, job workers writing the effect in CompleteTx's
// transaction), all on a fresh primary with a streaming standby, through
// one multi-host URL with target_session_attrs=read-write. Once a third
// are acknowledged the primary's WAL sender is paused, so commits are
// stranded on the primary (waiting for the synchronous standby, or, when
// asynchronous, acknowledged); then the primary and all its processes are
// SIGKILLed and the standby promoted. Nobody restarts: workers retry with
// the same key and their pools reconnect to the new primary.
//
// Synchronous: nothing acknowledged is lost, nothing runs twice; the
// stranded commits were never acknowledged (unknown), and their retries
// settle them once. Asynchronous: the commits acknowledged while the
// sender was paused are lost, and the check must find them.
func runFailover(ctx context.Context, t *trial) error {
	async := t.variant == failoverAsync
	t.expectLoss = async
	pair, err := pgtest.StartPair(ctx, &pgtest.PairOptions{Async: async})
	if err != nil {
		return fmt.Errorf("starting a primary and its standby: %w", err)
	}
	t.after = append(t.after, func() { pair.Close() })
	u, err := pair.CreateDatabase(ctx, dbName)
	if err != nil {
		return err
	}
	oldDB, oldLedger := t.r.db, t.r.ledger
	t.r.db = &database{url: u, driver: "postgres", desc: "primary and standby", owned: true}
	if err := t.r.open(ctx); err != nil {
		t.r.db = oldDB
		return err
	}
	t.after = append(t.after, func() {
		t.r.ledger.Close()
		t.r.db, t.r.ledger = oldDB, oldLedger
	})

	failedOver := false
	err = t.runMixed(ctx, -1, func() error {
		failedOver = true
		return t.failover(ctx, pair, async)
	})
	if !failedOver && err == nil {
		t.note("the operations were done before a third was acknowledged; the failover came after them (raise --ops)")
		err = t.failover(ctx, pair, async)
	}
	return err
}

// runMixed runs half the operations through ledger workers (Ledger.Do,
// the effect in the done mark's transaction, retrying every error with
// the same key) and half as jobs (enqueued twice each with the operation
// as unique key, job workers writing the effect in CompleteTx's
// transaction), Workers/2 of each, and calls atThird once, when a third
// of the operations are acknowledged. It returns when every operation has
// settled and the queue is empty. pace is the pause before each
// operation of a worker.
func (t *trial) runMixed(ctx context.Context, pace time.Duration, atThird func() error) error {
	keys := t.shuffled()
	jobKeys, ledgerKeys := keys[:len(keys)/2], keys[len(keys)/2:]
	isJob := make(map[string]bool, len(jobKeys))
	for _, k := range jobKeys {
		isJob[k] = true
	}
	t.ledgerKey = func(op string) string {
		if isJob[op] {
			return ""
		}
		return op
	}
	queue := "prove-" + t.r.runID + "-failover"
	jc, err := jobs.New(t.r.ledger, &jobs.Config{Queues: map[string]jobs.QueueConfig{queue: {}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}

	workers := max(1, t.r.cfg.Workers/2)
	if pace < 0 {
		// Paced to last about two seconds whatever the number of
		// operations, so that a fault lands in the middle.
		pace = min(200*time.Millisecond, 2*time.Second*time.Duration(workers)/time.Duration(max(1, len(keys)/2)))
	}
	var jw []*proc
	for range workers {
		p, err := t.start(ctx, spec{Role: roleJobs, Jobs: "work", Queue: queue, RetryErrors: true}, "")
		if err != nil {
			return err
		}
		if _, err := p.expect(ctx, evReady); err != nil {
			return err
		}
		jw = append(jw, p)
	}
	do := spec{Role: roleDo, RetryInFlight: true, RetryErrors: true, PaceMS: pace.Milliseconds()}
	enqueue := spec{Role: roleJobs, Jobs: "enqueue", Queue: queue, RetryErrors: true, PaceMS: pace.Milliseconds()}
	var ledgerJobs []job
	for i := range workers {
		do.Keys = ledgerKeys[i*len(ledgerKeys)/workers : (i+1)*len(ledgerKeys)/workers]
		enqueue.Keys = jobKeys[i*len(jobKeys)/workers : (i+1)*len(jobKeys)/workers]
		ledgerJobs = append(ledgerJobs, job{s: do}, job{s: enqueue})
	}
	done := make(chan error, 1)
	go func() { done <- t.runAll(ctx, ledgerJobs) }()

	called := atThird == nil
	var runErr error
wait:
	for {
		select {
		case runErr = <-done:
			break wait
		case <-time.After(2 * time.Millisecond):
		}
		if _, settled, _ := t.h.stats(); !called && settled >= len(keys)/3 {
			called = true
			if err := atThird(); err != nil {
				<-done
				return err
			}
		}
	}
	// The job workers run until the queue is empty, then stop.
	for {
		n, err := jc.Counts(ctx, queue)
		if err == nil && n[idemtype.JobAvailable] == 0 && n[idemtype.JobRunning] == 0 {
			break
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return errors.Join(runErr, err)
		}
	}
	for _, p := range jw {
		p.stdin.Close()
	}
	var errs []error
	for _, p := range jw {
		errs = append(errs, p.wait(ctx, false))
	}
	if err := errors.Join(errs...); err != nil {
		return errors.Join(runErr, fmt.Errorf("job workers: %w", err))
	}
	n, err := jc.Counts(ctx, queue)
	if err != nil {
		return errors.Join(runErr, err)
	}
	t.counts = func(r *Result) {
		r.Stuck += n[idemtype.JobRunning]
		if d := n[idemtype.JobDead]; d > 0 {
			t.fail("%d jobs dead-lettered", d)
		}
	}
	return runErr
}

// failover pauses the primary's WAL sender, lets commits strand on the
// primary, kills it and promotes the standby.
func (t *trial) failover(ctx context.Context, pair *pgtest.Pair, async bool) error {
	_, before, _ := t.h.stats()
	resume, err := pair.PauseWALSender()
	if err != nil {
		return err
	}
	// Asynchronous: wait for a few acknowledgements the standby cannot
	// have. Synchronous: commits now wait for the standby; give some time
	// to pile up.
	want := before + max(2, len(t.keys)/20)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if _, settled, _ := t.h.stats(); !async || settled >= want {
			if !async {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return err
				}
			}
			break
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
	_, stranded, _ := t.h.stats()
	killed := time.Now()
	if err := pair.KillPrimary(); err != nil {
		resume()
		return fmt.Errorf("killing the primary: %w", err)
	}
	if err := pair.Promote(ctx); err != nil {
		return fmt.Errorf("promoting the standby: %w", err)
	}
	t.note("1 failover: primary SIGKILLed with %d operations acknowledged (%d reported after its WAL sender was paused), standby promoted in %v",
		stranded, stranded-before, time.Since(killed).Round(time.Millisecond))
	return nil
}
