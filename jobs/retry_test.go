package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// A job that keeps failing is retried with backoff up to its attempt
// limit, then dead-lettered with every error kept; requeued, it runs
// again; a dead job can also be discarded.
func TestFailingJobIsDeadLetteredThenRequeued(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var healthy atomic.Bool
		var delays []int
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			if healthy.Load() {
				return nil
			}
			return fmt.Errorf("boom %d", j.Attempt)
		}))
		c, err := jobs.New(e.l, &jobs.Config{
			Workers: ws, PollInterval: 20 * time.Millisecond, MaxAttempts: 3, Logger: quietLogger(),
			Backoff: func(attempt int) time.Duration { delays = append(delays, attempt); return 10 * time.Millisecond },
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, testArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool { j, _ := c.Get(ctx, r.Job.ID); return j.State == idemtype.JobDead })
		j, err := c.Get(ctx, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Attempt != 3 || len(j.Errors) != 3 || j.Errors[2].Error != "boom 3" || j.Errors[0].Attempt != 1 || j.FinalizedAt.IsZero() {
			t.Fatalf("dead job: attempt %d, errors %+v, finalized %v", j.Attempt, j.Errors, j.FinalizedAt)
		}
		if fmt.Sprint(delays) != "[1 2]" {
			t.Fatalf("backoff asked for attempts %v, want [1 2]", delays)
		}
		dead, err := c.List(ctx, &jobs.ListParams{State: idemtype.JobDead})
		if err != nil || len(dead) != 1 || dead[0].ID != r.Job.ID {
			t.Fatalf("listing dead letters: %v, %v", dead, err)
		}

		healthy.Store(true)
		if _, err := c.Requeue(ctx, r.Job.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Requeue(ctx, r.Job.ID); !errors.Is(err, jobs.ErrWrongState) {
			t.Fatalf("requeue of a waiting job: %v, want ErrWrongState", err)
		}
		c2, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c2, func() bool { j, _ := c.Get(ctx, r.Job.ID); return j.State == idemtype.JobCompleted })
		if j, _ := c.Get(ctx, r.Job.ID); j.Attempt != 4 || len(j.Errors) != 3 {
			t.Fatalf("requeued job: attempt %d, %d errors; want 4 and the 3 old errors", j.Attempt, len(j.Errors))
		}

		if err := c.Discard(ctx, r.Job.ID); !errors.Is(err, jobs.ErrWrongState) {
			t.Fatalf("discard of a completed job: %v, want ErrWrongState", err)
		}
		if err := c.Discard(ctx, 1<<40); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("discard of a missing job: %v, want ErrNotFound", err)
		}
	})
}

// Permanent errors, and arguments that do not decode, dead-letter at once;
// RetryAfter overrides the backoff.
func TestPermanentAndRetryAfter(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			switch j.Args.N {
			case 1:
				return jobs.Permanent(errors.New("bad request"))
			case 2:
				return jobs.RetryAfter(time.Hour, errors.New("rate limited"))
			}
			panic("unexpected")
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		perm, _ := c.Enqueue(ctx, testArgs{N: 1}, nil)
		later, _ := c.Enqueue(ctx, testArgs{N: 2}, nil)
		panics, _ := c.Enqueue(ctx, testArgs{N: 3}, &jobs.EnqueueOpts{MaxAttempts: 1})
		undecodable, err := c.Enqueue(ctx, jobs.Raw{Name: "test", Data: []byte("{not json")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool {
			n, _ := c.Counts(ctx, "")
			return n[idemtype.JobDead] == 3 && n[idemtype.JobAvailable] == 1
		})
		for _, id := range []int64{perm.Job.ID, panics.Job.ID, undecodable.Job.ID} {
			j, _ := c.Get(ctx, id)
			if j.State != idemtype.JobDead || j.Attempt != 1 {
				t.Fatalf("job %d: %s after %d attempts, want dead after 1", id, j.State, j.Attempt)
			}
		}
		if j, _ := c.Get(ctx, panics.Job.ID); !strings.Contains(j.Errors[0].Error, "panic: unexpected") {
			t.Fatalf("panic recorded as %q", j.Errors[0].Error)
		}
		j, _ := c.Get(ctx, later.Job.ID)
		if wait := j.RunAt.Sub(j.AttemptedAt); wait < 59*time.Minute {
			t.Fatalf("RetryAfter(1h) scheduled the retry %v after the attempt", wait)
		}
	})
}

// Returning nil after a CompleteTx whose transaction rolled back does not
// mark the job done: it is retried, never completed without its effect.
func TestCompleteTxRolledBackIsRetried(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int32
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			if runs.Add(1) > 1 {
				return completeWithEffect(ctx, j, "second")
			}
			tx, err := j.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := j.CompleteTx(ctx, tx); err != nil {
				return err
			}
			return tx.Rollback() // a bug in the handler: nil, but nothing committed
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
			Backoff: func(int) time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := c.Enqueue(ctx, testArgs{}, nil)
		runUntil(t, c, func() bool { j, _ := c.Get(ctx, r.Job.ID); return j.State == idemtype.JobCompleted })
		j, _ := c.Get(ctx, r.Job.ID)
		if j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "did not commit") {
			t.Fatalf("job: attempt %d errors %+v; want a retry after the rolled-back completion", j.Attempt, j.Errors)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
	})
}
