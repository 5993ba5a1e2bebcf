package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// A cancelled job, due or scheduled, never runs, even ahead of a job of
// lower priority that does; cancelling it again returns it as it is;
// completed, dead and missing jobs are refused; cancelled jobs are pruned
// with completed ones.
func TestCancelAvailableNeverRuns(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var (
			mu  sync.Mutex
			ran []int
		)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			mu.Lock()
			ran = append(ran, j.Args.N)
			mu.Unlock()
			if j.Args.N < 0 {
				return jobs.Permanent(errors.New("refused"))
			}
			return nil
		}))
		log := newRunLog()
		c, err := jobs.New(e.l, &jobs.Config{
			Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(), Metrics: log,
			Queues: map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		due, err := c.Enqueue(ctx, testArgs{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		scheduled, err := c.Enqueue(ctx, testArgs{N: 2}, &jobs.EnqueueOpts{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{due.Job.ID, scheduled.Job.ID} {
			j, err := c.Cancel(ctx, id)
			if err != nil || j.State != idemtype.JobCancelled || j.FinalizedAt.IsZero() {
				t.Fatalf("cancel job %d: %+v, %v", id, j, err)
			}
		}
		if again, err := c.Cancel(ctx, due.Job.ID); err != nil || again.State != idemtype.JobCancelled {
			t.Fatalf("cancelling a cancelled job: %+v, %v", again, err)
		}
		if !log.saw(jobs.TransitionAvailable + "→" + jobs.TransitionCancelled) {
			t.Fatalf("no available→cancelled transition in %v", log.transitions)
		}
		last, err := c.Enqueue(ctx, testArgs{N: 3}, &jobs.EnqueueOpts{Priority: 4})
		if err != nil {
			t.Fatal(err)
		}
		dead, err := c.Enqueue(ctx, testArgs{N: -1}, &jobs.EnqueueOpts{Priority: 4})
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool {
			a, _ := c.Get(ctx, last.Job.ID)
			b, _ := c.Get(ctx, dead.Job.ID)
			return a.State == idemtype.JobCompleted && b.State == idemtype.JobDead
		})
		if got := fmt.Sprint(ran); got != "[3 -1]" {
			t.Fatalf("ran %s, want [3 -1]: cancelled jobs ran", got)
		}
		for _, id := range []int64{last.Job.ID, dead.Job.ID} {
			if _, err := c.Cancel(ctx, id); !errors.Is(err, jobs.ErrWrongState) {
				t.Fatalf("cancel of finished job %d: %v, want ErrWrongState", id, err)
			}
		}
		if _, err := c.Cancel(ctx, 1<<40); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("cancel of a missing job: %v, want ErrNotFound", err)
		}
		counts, err := c.Counts(ctx, "")
		if err != nil || counts[idemtype.JobCancelled] != 2 {
			t.Fatalf("counts %v, %v", counts, err)
		}
		n, err := e.l.Driver().PruneJobs(ctx, 0, 100)
		if err != nil || n != 3 {
			t.Fatalf("pruned %d (%v), want the completed and the two cancelled jobs", n, err)
		}
	})
}

// Cancelling a running job cancels its context with ErrCancelled (at its
// next heartbeat) and refuses its completion: the effect written in the
// completion's transaction rolls back and the job stays cancelled.
func TestCancelRunningJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		started := make(chan int64, 1)
		cause, completion := make(chan error, 1), make(chan error, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			started <- j.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			err := completeWithEffect(context.WithoutCancel(ctx), j, "cancelled")
			completion <- err
			return err
		}))
		log := newRunLog()
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: time.Second, PollInterval: 20 * time.Millisecond, Logger: quietLogger(), Metrics: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, testArgs{}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(ctx)
		id := <-started
		j, err := c.Cancel(ctx, id)
		if err != nil || j.State != idemtype.JobCancelled {
			t.Fatalf("cancel: %+v, %v", j, err)
		}
		if err := <-cause; !errors.Is(err, jobs.ErrCancelled) {
			t.Fatalf("context cause = %v, want ErrCancelled", err)
		}
		if err := <-completion; !errors.Is(err, jobs.ErrCancelled) || !errors.Is(err, jobs.ErrLeaseLost) {
			t.Fatalf("completion after cancel: %v, want ErrCancelled and ErrLeaseLost", err)
		}
		if got := <-log.runs; got != jobs.RunCancelled {
			t.Fatalf("run outcome %q, want cancelled", got)
		}
		if !log.saw(jobs.TransitionRunning + "→" + jobs.TransitionCancelled) {
			t.Fatalf("no running→cancelled transition in %v", log.transitions)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 0 {
			t.Fatalf("a cancelled job wrote %d effects", n)
		}
		if j, err := c.Get(ctx, id); err != nil || j.State != idemtype.JobCancelled || len(j.Errors) != 0 {
			t.Fatalf("job after its worker ended: %+v, %v", j, err)
		}
	})
}

// Cancel racing a completion, released at once through one closed channel,
// many times: exactly one wins. The completion is the handler's (effect
// and CompleteTx's fenced write in one transaction) or the client's own
// (group-committed) on alternate rounds. A won cancel leaves no effect; a
// won completion leaves exactly one and Cancel gets ErrWrongState.
func TestCancelRacesCompletion(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		drv := e.l.Driver()
		const rounds = 60
		wins := map[string]int{}
		for round := range rounds {
			r, err := c.Enqueue(ctx, testArgs{N: round}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: jobs.DefaultQueue, Worker: "w", Limit: 1, LeaseID: int64(round + 1), Lease: time.Minute})
			if err != nil || len(rows) != 1 || rows[0].ID != r.Job.ID {
				t.Fatalf("round %d: claim %v, %v", round, rows, err)
			}
			fence := driver.JobFence{ID: rows[0].ID, Attempt: rows[0].Attempt, LeaseID: rows[0].LeaseID}
			inTx := round%2 == 0
			gate := make(chan struct{})
			var completeErr, cancelErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				<-gate
				completeErr = complete(ctx, e, drv, fence, inTx)
			})
			wg.Go(func() {
				<-gate
				_, cancelErr = c.Cancel(ctx, fence.ID)
			})
			close(gate)
			wg.Wait()
			j, err := c.Get(ctx, fence.ID)
			if err != nil {
				t.Fatal(err)
			}
			effects := e.count(t, `SELECT count(*) FROM effects WHERE job_id = ?`, fence.ID)
			switch {
			case completeErr == nil && cancelErr == nil:
				t.Fatalf("round %d: both the completion and the cancel won (state %s)", round, j.State)
			case completeErr == nil:
				if !errors.Is(cancelErr, jobs.ErrWrongState) || j.State != idemtype.JobCompleted || effects != 1 {
					t.Fatalf("round %d: completion won; cancel %v, state %s, %d effects", round, cancelErr, j.State, effects)
				}
				wins["complete"]++
			case cancelErr == nil:
				if !errors.Is(completeErr, driver.ErrFenced) || j.State != idemtype.JobCancelled || effects != 0 {
					t.Fatalf("round %d: cancel won; completion %v, state %s, %d effects", round, completeErr, j.State, effects)
				}
				wins["cancel"]++
			default:
				t.Fatalf("round %d: neither won: completion %v, cancel %v", round, completeErr, cancelErr)
			}
		}
		t.Logf("%d rounds: %v", rounds, wins)
	})
}

// complete ends a claim as completed: inside a transaction that also
// writes an effect row (as CompleteTx does), or in the driver's own write
// (as the client does when Work returns nil; then the effect row is
// written after, only if the completion took).
func complete(ctx context.Context, e *env, drv driver.Driver, f driver.JobFence, inTx bool) error {
	p := driver.FinishJobParams{JobFence: f, State: idemtype.JobCompleted}
	if !inTx {
		if err := drv.FinishJob(ctx, driver.Shared, p); err != nil {
			return err
		}
		_, err := e.db.ExecContext(ctx, e.q(`INSERT INTO effects (job_id, worker, attempt) VALUES (?, 'w', ?)`), f.ID, f.Attempt)
		return err
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, e.q(`INSERT INTO effects (job_id, worker, attempt) VALUES (?, 'w', ?)`), f.ID, f.Attempt); err != nil {
		return err
	}
	ex, err := drv.Executor(tx)
	if err != nil {
		return err
	}
	if err := drv.FinishJob(ctx, ex, p); err != nil {
		return err
	}
	return tx.Commit()
}
