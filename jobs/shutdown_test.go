package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// Stop waits for running jobs to finish.
func TestStopFinishesRunningJobs(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			close(started)
			<-release
			return completeWithEffect(ctx, j, "w")
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := c.Enqueue(ctx, testArgs{}, nil)
		c.Start(ctx)
		<-started
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(ctx) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned %v with a job running", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if j, _ := c.Get(ctx, r.Job.ID); j.State != idemtype.JobCompleted {
			t.Fatalf("job %s after Stop, want completed", j.State)
		}
	})
}

// When Stop's context ends first, running jobs are cancelled and released
// at once: available again, with no error recorded and no backoff; the
// fenced-out handler cannot complete.
func TestStopReleasesJobsWhenOutOfTime(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		started := make(chan struct{})
		var causes atomic.Value
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			close(started)
			<-ctx.Done()
			causes.Store(context.Cause(ctx))
			return ctx.Err()
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := c.Enqueue(ctx, testArgs{}, nil)
		c.Start(ctx)
		<-started
		stopCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := c.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded", err)
		}
		j, _ := c.Get(ctx, r.Job.ID)
		if j.State != idemtype.JobAvailable || len(j.Errors) != 0 || j.RunAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("released job: %s, errors %+v, run at %v", j.State, j.Errors, j.RunAt)
		}
		waitFor(t, 5*time.Second, func() bool { return causes.Load() != nil })
		if err := causes.Load().(error); !errors.Is(err, jobs.ErrStopped) {
			t.Fatalf("job context cause %v, want ErrStopped", err)
		}
	})
}

// A queue's MaxWorkers bounds how many of its jobs one client runs at once.
func TestQueueConcurrency(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var now, peak atomic.Int32
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			n := now.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			now.Add(-1)
			return nil
		}))
		c, err := jobs.New(e.l, &jobs.Config{
			Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
			Queues: map[string]jobs.QueueConfig{"narrow": {MaxWorkers: 3}, "unworked": {}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var batch []jobs.EnqueueParams
		for range 30 {
			batch = append(batch, jobs.EnqueueParams{Args: testArgs{}, Opts: &jobs.EnqueueOpts{Queue: "narrow"}})
		}
		batch = append(batch, jobs.EnqueueParams{Args: testArgs{}, Opts: &jobs.EnqueueOpts{Queue: "unworked"}})
		if _, err := c.EnqueueMany(ctx, batch); err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool { n, _ := c.Counts(ctx, "narrow"); return n[idemtype.JobCompleted] == 30 })
		if p := peak.Load(); p != 3 {
			t.Fatalf("peak concurrency %d, want 3", p)
		}
		if n, _ := c.Counts(ctx, "unworked"); n[idemtype.JobAvailable] != 1 {
			t.Fatalf("a queue with MaxWorkers 0 was worked: %v", n)
		}
	})
}

// A scheduled job is not claimed before its time.
func TestScheduledJobWaits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("w"))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		later, _ := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Delay: 300 * time.Millisecond})
		at, _ := c.Enqueue(ctx, testArgs{N: 2}, &jobs.EnqueueOpts{RunAt: time.Now().Add(300 * time.Millisecond)})
		now, _ := c.Enqueue(ctx, testArgs{N: 3}, nil)
		runUntil(t, c, func() bool { n, _ := c.Counts(ctx, ""); return n[idemtype.JobCompleted] == 3 })
		for _, r := range []*jobs.EnqueueResult{later, at, now} {
			j, _ := c.Get(ctx, r.Job.ID)
			if j.AttemptedAt.Before(j.RunAt) {
				t.Fatalf("job %d ran at %v, before its time %v", j.ID, j.AttemptedAt, j.RunAt)
			}
		}
		if j, _ := c.Get(ctx, later.Job.ID); j.RunAt.Sub(j.CreatedAt) != 300*time.Millisecond {
			t.Fatalf("Delay scheduled the job %v after creation, want 300ms", j.RunAt.Sub(j.CreatedAt))
		}
	})
}
