package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/jobs"
)

// One worker slot takes the due jobs of a queue by priority (1 first),
// then RunAt, then ID; a job scheduled for later waits whatever its
// priority.
func TestPriorityOrdersClaims(t *testing.T) {
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
			return nil
		}))
		c, err := jobs.New(e.l, &jobs.Config{
			Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
			Queues: map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		past := time.Now().Add(-time.Hour)
		// N is the expected run order.
		for _, j := range []struct {
			n, prio int
			runAt   time.Time
		}{
			{6, 4, past},
			{3, 2, past.Add(time.Second)},
			{1, 0, past.Add(2 * time.Second)}, // 0 means 1, the highest
			{4, 3, past},
			{2, 2, past},
			{0, 1, past.Add(3 * time.Second)},
			{5, 3, past}, // same priority and RunAt as 4: by ID
		} {
			if _, err := c.Enqueue(ctx, testArgs{N: j.n}, &jobs.EnqueueOpts{Priority: j.prio, RunAt: j.runAt}); err != nil {
				t.Fatal(err)
			}
		}
		late, err := c.Enqueue(ctx, testArgs{N: 99}, &jobs.EnqueueOpts{Priority: 1, Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if late.Job.Priority != 1 {
			t.Fatalf("stored priority %d, want 1", late.Job.Priority)
		}
		runUntil(t, c, func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 7 })
		// Ordered by (priority, run_at, id): the 0 and 1 both mean priority 1.
		if got := fmt.Sprint(ran); got != "[1 0 2 3 4 5 6]" {
			t.Fatalf("ran %s, want [1 0 2 3 4 5 6]", got)
		}
	})
}

// Priority is checked before anything is written; a batch keeps each
// job's priority.
func TestPriorityInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		for _, p := range []int{-1, 5} {
			_, err := c.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{Priority: p})
			var ie *idem.InputError
			if !errors.Is(err, idem.ErrInvalid) || !errors.As(err, &ie) || ie.Field != "priority" {
				t.Fatalf("priority %d: %v, want an input error on priority", p, err)
			}
		}
		res, err := c.EnqueueMany(ctx, []jobs.EnqueueParams{
			{Args: testArgs{N: 1}, Opts: &jobs.EnqueueOpts{Priority: 4}},
			{Args: testArgs{N: 2}},
			{Args: testArgs{N: 3}, Opts: &jobs.EnqueueOpts{Priority: 2}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{4, 1, 2} {
			got, err := c.Get(ctx, res[i].Job.ID)
			if err != nil || got.Priority != want || res[i].Job.Priority != want {
				t.Fatalf("batch job %d: priority %d (returned %d), want %d: %v", i, got.Priority, res[i].Job.Priority, want, err)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 3 {
			t.Fatalf("%d jobs stored, want 3", n)
		}
	})
}

// The driver hands a batch out in claim order, and a claim of n takes the
// n first by priority.
func TestDriverClaimByPriority(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		drv := e.l.Driver()
		at := time.Now().Add(-time.Minute)
		var ins []driver.JobInsert
		for i, p := range []int{3, 1, 4, 2, 1, 3} {
			ins = append(ins, driver.JobInsert{Queue: "q", Kind: "k", Args: fmt.Appendf(nil, "%d", i), MaxAttempts: 1, Priority: p, RunAt: at})
		}
		if _, _, err := drv.EnqueueJobs(ctx, driver.Shared, ins); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, limit := range []int{3, 3} {
			rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w", Limit: limit, LeaseID: 1, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				got = append(got, fmt.Sprintf("%d:%s", r.Priority, r.Args))
			}
			got = append(got, "|")
		}
		if s := fmt.Sprint(got); s != "[1:1 1:4 2:3 | 3:0 3:5 4:2 |]" {
			t.Fatalf("claimed %s", s)
		}
	})
}
