package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// pendingOnly is unique by args while waiting: one pending job, any number
// running.
var pendingOnly = &jobs.UniqueOpts{ByArgs: true, ByState: jobs.StatesPending}

// 64 producers race (goroutines on four pools, released at once) to
// enqueue the same pending-only job, in rounds; between rounds a worker
// claims the pending job. Every round makes exactly one pending job and
// every producer gets it back: a running job does not hold the key, a
// pending one does.
func TestUniqueByStateRacingProducers(t *testing.T) {
	const producers, rounds = 64, 3
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var clients []*jobs.Client
		for range 4 {
			clients = append(clients, newProducer(t, &env{driver: e.driver, l: openLedger(t, e.url)}))
		}
		for round := range rounds {
			start := make(chan struct{})
			results := make(chan *jobs.EnqueueResult, producers)
			var wg sync.WaitGroup
			for i := range producers {
				c := clients[i%len(clients)]
				wg.Go(func() {
					<-start
					r, err := c.Enqueue(ctx, testArgs{N: 7}, &jobs.EnqueueOpts{Unique: pendingOnly})
					if err != nil {
						t.Error(err)
						return
					}
					results <- r
				})
			}
			close(start)
			wg.Wait()
			close(results)
			inserted, ids := 0, map[int64]bool{}
			for r := range results {
				if !r.Duplicate {
					inserted++
				}
				ids[r.Job.ID] = true
			}
			if inserted != 1 || len(ids) != 1 {
				t.Fatalf("round %d: %d inserted, %d distinct jobs returned; want 1 and 1", round, inserted, len(ids))
			}
			if n := e.count(t, `SELECT count(*) FROM idem_jobs WHERE state = 'available'`); n != 1 {
				t.Fatalf("round %d: %d pending jobs, want 1", round, n)
			}
			claimed, err := e.l.Driver().ClaimJobs(ctx, driver.ClaimJobsParams{Queue: jobs.DefaultQueue, Worker: "t", Limit: 10, LeaseID: 1, Lease: time.Minute})
			if err != nil || len(claimed) != 1 {
				t.Fatalf("round %d: claim: %d jobs, %v", round, len(claimed), err)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs WHERE state = 'running'`); n != rounds {
			t.Fatalf("%d running jobs, want %d", n, rounds)
		}
	})
}

// A pending-only job released its key when claimed: its retry (back to
// available) while another pending job holds the key is not refused, and
// it does not take the key back.
func TestUniquePendingRetryAfterNewJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		drv := e.l.Driver()
		first, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Unique: pendingOnly})
		if err != nil {
			t.Fatal(err)
		}
		claimed, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: jobs.DefaultQueue, Worker: "t", Limit: 1, LeaseID: 9, Lease: time.Minute})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		second, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Unique: pendingOnly})
		if err != nil || second.Duplicate {
			t.Fatalf("enqueue while the first runs: %+v, %v", second, err)
		}
		err = drv.FinishJob(ctx, driver.Shared, driver.FinishJobParams{
			JobFence: driver.JobFence{ID: first.Job.ID, Attempt: 1, LeaseID: 9}, State: idemtype.JobAvailable, Error: "boom"})
		if err != nil {
			t.Fatalf("retry of the first job: %v", err)
		}
		again, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Unique: pendingOnly})
		if err != nil || !again.Duplicate || again.Job.ID != second.Job.ID {
			t.Fatalf("enqueue after the retry: %+v, %v; want the second job %d", again, err, second.Job.ID)
		}
		r, err := c.Get(ctx, first.Job.ID)
		if err != nil || r.State != idemtype.JobAvailable || r.UniqueKey != "" {
			t.Fatalf("first job after its retry: state %s key %q, %v", r.State, r.UniqueKey, err)
		}
	})
}

// DuplicateReject: the second enqueue is an error matching ErrDuplicate
// that carries the existing job, inside a transaction too; a batch refuses
// the policy.
func TestUniqueReject(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		opts := &jobs.EnqueueOpts{UniqueKey: "nightly", Unique: &jobs.UniqueOpts{OnDuplicate: jobs.DuplicateReject}}
		first, err := c.Enqueue(ctx, testArgs{N: 1}, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Enqueue(ctx, testArgs{N: 2}, opts)
		var dup *jobs.DuplicateError
		if !errors.Is(err, jobs.ErrDuplicate) || !errors.As(err, &dup) || dup.Job.ID != first.Job.ID {
			t.Fatalf("second enqueue: %v; want ErrDuplicate carrying job %d", err, first.Job.ID)
		}
		tx, err := c.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := c.EnqueueTx(ctx, tx, testArgs{N: 3}, opts); !errors.Is(err, jobs.ErrDuplicate) {
			t.Fatalf("enqueue in a transaction: %v; want ErrDuplicate", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("the caller's transaction after a rejected duplicate: %v", err)
		}
		_, err = c.EnqueueMany(ctx, []jobs.EnqueueParams{{Args: testArgs{N: 4}, Opts: opts}, {Args: testArgs{N: 5}}})
		if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("batch with DuplicateReject: %v; want ErrInvalid", err)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 1 {
			t.Fatalf("%d jobs, want 1", n)
		}
	})
}

// ByArgs compares canonical JSON (key order and number spelling do not
// matter, values do); ByPeriod makes one job per period; keys are per
// queue; without ByState a completed job keeps refusing duplicates.
func TestUniqueKeyParts(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, err := jobs.New(e.l, &jobs.Config{Logger: quietLogger(), Queues: map[string]jobs.QueueConfig{"a": {}, "b": {}}})
		if err != nil {
			t.Fatal(err)
		}
		byArgs := &jobs.UniqueOpts{ByArgs: true}
		enq := func(args jobs.Args, o jobs.EnqueueOpts) *jobs.EnqueueResult {
			t.Helper()
			r, err := c.Enqueue(ctx, args, &o)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		raw := func(s string) jobs.Raw { return jobs.Raw{Name: "raw", Data: []byte(s)} }
		a := enq(raw(`{"to":"ann","n":1}`), jobs.EnqueueOpts{Queue: "a", Unique: byArgs})
		if r := enq(raw(`{ "n": 1.0, "to": "ann" }`), jobs.EnqueueOpts{Queue: "a", Unique: byArgs}); !r.Duplicate || r.Job.ID != a.Job.ID {
			t.Fatalf("same args, other spelling: duplicate %v", r.Duplicate)
		}
		if r := enq(raw(`{"to":"bob","n":1}`), jobs.EnqueueOpts{Queue: "a", Unique: byArgs}); r.Duplicate {
			t.Fatal("other args: duplicate")
		}
		if r := enq(raw(`{"to":"ann","n":1}`), jobs.EnqueueOpts{Queue: "b", Unique: byArgs}); r.Duplicate {
			t.Fatal("same args on another queue: duplicate")
		}
		if _, err := c.Enqueue(ctx, raw(`{not json`), &jobs.EnqueueOpts{Queue: "a", Unique: byArgs}); !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("ByArgs on bytes that are not JSON: %v; want ErrInvalid", err)
		}

		hour := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
		byHour := &jobs.UniqueOpts{ByPeriod: time.Hour}
		p1 := enq(testArgs{N: 1}, jobs.EnqueueOpts{Queue: "a", RunAt: hour.Add(5 * time.Minute), Unique: byHour})
		if r := enq(testArgs{N: 2}, jobs.EnqueueOpts{Queue: "a", RunAt: hour.Add(55 * time.Minute), Unique: byHour}); !r.Duplicate || r.Job.ID != p1.Job.ID {
			t.Fatal("same hour: not a duplicate")
		}
		if r := enq(testArgs{N: 3}, jobs.EnqueueOpts{Queue: "a", RunAt: hour.Add(65 * time.Minute), Unique: byHour}); r.Duplicate {
			t.Fatal("next hour: duplicate")
		}
		if want := "kind:test/period:2030-01-02T03:00:00Z"; p1.Job.UniqueKey != want {
			t.Fatalf("key %q, want %q", p1.Job.UniqueKey, want)
		}

		e.exec(t, `UPDATE idem_jobs SET state = 'completed' WHERE id = ?`, a.Job.ID)
		if r := enq(raw(`{"to":"ann","n":1}`), jobs.EnqueueOpts{Queue: "a", Unique: byArgs}); !r.Duplicate {
			t.Fatal("every state: a completed job no longer holds its key")
		}
		done := &jobs.UniqueOpts{ByArgs: true, ByState: []idemtype.JobState{idemtype.JobAvailable, idemtype.JobRunning}}
		k := enq(raw(`{"k":1}`), jobs.EnqueueOpts{Queue: "a", Unique: done})
		e.exec(t, `UPDATE idem_jobs SET state = 'completed' WHERE id = ?`, k.Job.ID)
		if r := enq(raw(`{"k":1}`), jobs.EnqueueOpts{Queue: "a", Unique: done}); r.Duplicate {
			t.Fatal("a completed job holds a key limited to available and running")
		}
		for _, bad := range []*jobs.UniqueOpts{{ByPeriod: -time.Second}, {ByState: []idemtype.JobState{"pending"}}, {OnDuplicate: 7}} {
			if _, err := c.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{Queue: "a", Unique: bad}); !errors.Is(err, idem.ErrInvalid) {
				t.Errorf("%+v: %v; want ErrInvalid", bad, err)
			}
		}
	})
}
