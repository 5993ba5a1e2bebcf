package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// twoQueues is a producer that may enqueue on queues "a" and "b".
func twoQueues(t *testing.T, l *env) *jobs.Client {
	t.Helper()
	c, err := jobs.New(l.l, &jobs.Config{Logger: quietLogger(), Queues: map[string]jobs.QueueConfig{"a": {}, "b": {}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// 64 producers (goroutines on four pools, released at once) enqueue the
// same unique job, half on queue "a" and half on queue "b". Across queues
// that makes one job, which every producer gets back; per queue (the
// default, River's ByQueue) one job per queue, which every producer of
// that queue gets back.
func TestUniqueAcrossQueuesRacingProducers(t *testing.T) {
	const producers = 64
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var clients []*jobs.Client
		for range 4 {
			clients = append(clients, twoQueues(t, &env{driver: e.driver, l: openLedger(t, e.url)}))
		}
		race := func(n int, u *jobs.UniqueOpts) (inserted int, ids map[string]map[int64]bool) {
			start := make(chan struct{})
			type got struct {
				queue string
				r     *jobs.EnqueueResult
			}
			results := make(chan got, producers)
			var wg sync.WaitGroup
			for i := range producers {
				c, queue := clients[i%len(clients)], []string{"a", "b"}[i%2]
				wg.Go(func() {
					<-start
					r, err := c.Enqueue(ctx, testArgs{N: n}, &jobs.EnqueueOpts{Queue: queue, Unique: u})
					if err != nil {
						t.Error(err)
						return
					}
					results <- got{queue, r}
				})
			}
			close(start)
			wg.Wait()
			close(results)
			ids = map[string]map[int64]bool{"a": {}, "b": {}}
			for g := range results {
				if !g.r.Duplicate {
					inserted++
				}
				ids[g.queue][g.r.Job.ID] = true
			}
			return inserted, ids
		}

		inserted, ids := race(1, &jobs.UniqueOpts{ByArgs: true, AcrossQueues: true})
		if inserted != 1 || len(ids["a"]) != 1 || len(ids["b"]) != 1 {
			t.Fatalf("across queues: %d inserted, %d and %d distinct jobs returned to the producers of a and b; want 1, 1, 1", inserted, len(ids["a"]), len(ids["b"]))
		}
		for id := range ids["a"] {
			if !ids["b"][id] {
				t.Fatalf("across queues: the producers of a got job %d, those of b %v", id, ids["b"])
			}
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 1 {
			t.Fatalf("across queues: %d jobs, want 1", n)
		}

		inserted, ids = race(2, &jobs.UniqueOpts{ByArgs: true})
		if inserted != 2 || len(ids["a"]) != 1 || len(ids["b"]) != 1 {
			t.Fatalf("per queue: %d inserted, %d and %d distinct jobs returned to the producers of a and b; want 2, 1, 1", inserted, len(ids["a"]), len(ids["b"]))
		}
		for id := range ids["a"] {
			if ids["b"][id] {
				t.Fatalf("per queue: the producers of a and b both got job %d", id)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 3 {
			t.Fatalf("%d jobs, want 3 (one across queues, one per queue)", n)
		}
	})
}

// A duplicate across queues gets the existing job on its own queue
// (DuplicateReturn) or an ErrDuplicate carrying it (DuplicateReject), also
// in a batch and in a transaction; a key limited to pending releases it on
// claim, for every queue; keys across queues and per queue are apart.
func TestUniqueAcrossQueuesDuplicates(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := twoQueues(t, e)
		across := &jobs.UniqueOpts{AcrossQueues: true}
		first, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Queue: "a", UniqueKey: "nightly", Unique: across})
		if err != nil || first.Duplicate || first.Job.Queue != "a" || first.Job.UniqueKey != "nightly" {
			t.Fatalf("first enqueue: %+v, %v", first, err)
		}
		r, err := c.Enqueue(ctx, testArgs{N: 2}, &jobs.EnqueueOpts{Queue: "b", UniqueKey: "nightly", Unique: across})
		if err != nil || !r.Duplicate || r.Job.ID != first.Job.ID || r.Job.Queue != "a" {
			t.Fatalf("duplicate on queue b: %+v, %v; want job %d on queue a", r, err, first.Job.ID)
		}
		reject := &jobs.UniqueOpts{AcrossQueues: true, OnDuplicate: jobs.DuplicateReject}
		_, err = c.Enqueue(ctx, testArgs{N: 3}, &jobs.EnqueueOpts{Queue: "b", UniqueKey: "nightly", Unique: reject})
		var dup *jobs.DuplicateError
		if !errors.Is(err, jobs.ErrDuplicate) || !errors.As(err, &dup) || dup.Job.ID != first.Job.ID || dup.Job.Queue != "a" {
			t.Fatalf("rejected duplicate on queue b: %v; want ErrDuplicate carrying job %d of queue a", err, first.Job.ID)
		}
		tx, err := c.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := c.EnqueueTx(ctx, tx, testArgs{N: 4}, &jobs.EnqueueOpts{Queue: "b", UniqueKey: "nightly", Unique: reject}); !errors.Is(err, jobs.ErrDuplicate) {
			t.Fatalf("duplicate on queue b in a transaction: %v; want ErrDuplicate", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// The same key per queue is another key: it inserts on a, once.
		own, err := c.Enqueue(ctx, testArgs{N: 5}, &jobs.EnqueueOpts{Queue: "a", UniqueKey: "nightly"})
		if err != nil || own.Duplicate {
			t.Fatalf("the same key per queue: %+v, %v; want a new job", own, err)
		}
		// A batch: duplicates across queues within it and with the table.
		res, err := c.EnqueueMany(ctx, []jobs.EnqueueParams{
			{Args: testArgs{N: 6}, Opts: &jobs.EnqueueOpts{Queue: "b", UniqueKey: "weekly", Unique: across}},
			{Args: testArgs{N: 7}, Opts: &jobs.EnqueueOpts{Queue: "a", UniqueKey: "weekly", Unique: across}},
			{Args: testArgs{N: 8}, Opts: &jobs.EnqueueOpts{Queue: "b", UniqueKey: "nightly", Unique: across}},
			{Args: testArgs{N: 9}, Opts: &jobs.EnqueueOpts{Queue: "b", UniqueKey: "nightly"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			dup   bool
			queue string
		}{{false, "b"}, {true, "b"}, {true, "a"}, {false, "b"}}
		for i, w := range want {
			if res[i].Duplicate != w.dup || res[i].Job.Queue != w.queue {
				t.Errorf("batch job %d: duplicate %v on queue %s; want %v on %s", i, res[i].Duplicate, res[i].Job.Queue, w.dup, w.queue)
			}
		}
		if res[1].Job.ID != res[0].Job.ID || res[2].Job.ID != first.Job.ID {
			t.Errorf("batch duplicates got jobs %d and %d; want %d and %d", res[1].Job.ID, res[2].Job.ID, res[0].Job.ID, first.Job.ID)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 4 {
			t.Fatalf("%d jobs, want 4", n)
		}

		// Pending only: a claim on queue a frees the key for queue b.
		pending := &jobs.UniqueOpts{ByArgs: true, ByState: jobs.StatesPending, AcrossQueues: true}
		p, err := c.Enqueue(ctx, testArgs{N: 10}, &jobs.EnqueueOpts{Queue: "a", Unique: pending})
		if err != nil || p.Duplicate {
			t.Fatalf("pending-only job: %+v, %v", p, err)
		}
		if r, err := c.Enqueue(ctx, testArgs{N: 10}, &jobs.EnqueueOpts{Queue: "b", Unique: pending}); err != nil || !r.Duplicate || r.Job.ID != p.Job.ID {
			t.Fatalf("pending-only duplicate on queue b: %+v, %v", r, err)
		}
		claimed, err := e.l.Driver().ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "a", Worker: "t", Limit: 10, LeaseID: 1, Lease: time.Minute})
		if err != nil || len(claimed) != 3 {
			t.Fatalf("claim on a: %d jobs, %v; want 3", len(claimed), err)
		}
		r, err = c.Enqueue(ctx, testArgs{N: 10}, &jobs.EnqueueOpts{Queue: "b", Unique: pending})
		if err != nil || r.Duplicate || r.Job.Queue != "b" {
			t.Fatalf("pending-only job on b after the claim on a: %+v, %v; want a new job", r, err)
		}
		if got, err := c.Get(ctx, p.Job.ID); err != nil || got.State != idemtype.JobRunning || got.UniqueKey != "" {
			t.Fatalf("claimed job: state %s key %q, %v; want running without a key", got.State, got.UniqueKey, err)
		}
	})
}
