package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

func newProducer(t *testing.T, e *env) *jobs.Client {
	t.Helper()
	c, err := jobs.New(e.l, &jobs.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Producers racing to enqueue the same unique key (goroutines on four
// separate pools, released at once) make one job; every one of them gets
// that job back, and all but one are told it was a duplicate.
func TestConcurrentEnqueueSameKeyMakesOneJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		const pools, perPool = 4, 8
		var clients []*jobs.Client
		for range pools {
			clients = append(clients, newProducer(t, &env{driver: e.driver, l: openLedger(t, e.url)}))
		}
		start := make(chan struct{})
		results := make(chan *jobs.EnqueueResult, pools*perPool)
		var wg sync.WaitGroup
		for _, c := range clients {
			for range perPool {
				wg.Go(func() {
					<-start
					r, err := c.Enqueue(context.Background(), testArgs{N: 7}, &jobs.EnqueueOpts{UniqueKey: "order-7"})
					if err != nil {
						t.Error(err)
						return
					}
					results <- r
				})
			}
		}
		close(start)
		wg.Wait()
		close(results)
		var ids = map[int64]bool{}
		fresh := 0
		for r := range results {
			ids[r.Job.ID] = true
			if !r.Duplicate {
				fresh++
			}
		}
		if len(ids) != 1 || fresh != 1 {
			t.Fatalf("got job ids %v and %d non-duplicate results, want one job, one insert", ids, fresh)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 1 {
			t.Fatalf("%d jobs in the table, want 1", n)
		}
	})
}

// A unique key refuses duplicates for as long as its job exists: waiting,
// completed or dead; after the completed job is pruned the key is free.
func TestUniqueKeyHoldsUntilPruned(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("w"))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Retention: time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		first, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{UniqueKey: "k"})
		if err != nil || first.Duplicate {
			t.Fatalf("first enqueue: %+v, %v", first, err)
		}
		again, err := c.Enqueue(ctx, testArgs{N: 2}, &jobs.EnqueueOpts{UniqueKey: "k"})
		if err != nil || !again.Duplicate || again.Job.ID != first.Job.ID || string(again.Job.Args) != `{"n":1}` {
			t.Fatalf("second enqueue while waiting: %+v, %v; want the first job, duplicate", again, err)
		}
		// Another queue is another key space.
		other, err := jobs.New(e.l, &jobs.Config{Queues: map[string]jobs.QueueConfig{"other": {}}, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := other.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{Queue: "other", UniqueKey: "k"}); err != nil || r.Duplicate {
			t.Fatalf("same key on another queue: %+v, %v", r, err)
		}

		runUntil(t, c, func() bool { r, _ := c.Get(ctx, first.Job.ID); return r.State == idemtype.JobCompleted })
		if r, err := c.Enqueue(ctx, testArgs{N: 3}, &jobs.EnqueueOpts{UniqueKey: "k"}); err != nil || !r.Duplicate || r.Job.State != idemtype.JobCompleted {
			t.Fatalf("enqueue after completion: %+v, %v; want the completed job, duplicate", r, err)
		}
		time.Sleep(5 * time.Millisecond)
		if n, err := c.Prune(ctx); err != nil || n != 1 {
			t.Fatalf("prune: %d, %v; want 1", n, err)
		}
		if r, err := c.Enqueue(ctx, testArgs{N: 4}, &jobs.EnqueueOpts{UniqueKey: "k"}); err != nil || r.Duplicate {
			t.Fatalf("enqueue after prune: %+v, %v; want a new job", r, err)
		}
	})
}

// runUntil starts c, waits for cond, and stops c.
func runUntil(t *testing.T, c *jobs.Client, cond func() bool) {
	t.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, cond)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// EnqueueTx commits with the business write or not at all.
func TestEnqueueTxJoinsTheTransaction(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		for _, commit := range []bool{false, true} {
			tx, err := c.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(e.q(`INSERT INTO effects (job_id, worker, attempt) VALUES (0, 'order', 0)`)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.EnqueueTx(ctx, tx, testArgs{N: 1}, &jobs.EnqueueOpts{UniqueKey: "order-1"}); err != nil {
				t.Fatal(err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if commit {
				want = 1
			}
			if jobsN, orders := e.count(t, `SELECT count(*) FROM idem_jobs`), e.count(t, `SELECT count(*) FROM effects`); jobsN != want || orders != want {
				t.Fatalf("commit=%v: %d jobs, %d business rows; want %d of each", commit, jobsN, orders, want)
			}
		}
	})
}

// While a transaction holding a unique key is open, a concurrent enqueue of
// the key waits for it, then returns the job it committed.
func TestEnqueueWaitsForOpenTransactionWithSameKey(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		other := newProducer(t, &env{driver: e.driver, l: openLedger(t, e.url)})
		tx, err := c.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mine, err := c.EnqueueTx(ctx, tx, testArgs{N: 1}, &jobs.EnqueueOpts{UniqueKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *jobs.EnqueueResult, 1)
		go func() {
			r, err := other.Enqueue(ctx, testArgs{N: 2}, &jobs.EnqueueOpts{UniqueKey: "k"})
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		select {
		case r := <-got:
			t.Fatalf("enqueue returned %+v while the first transaction was open", r)
		case <-time.After(200 * time.Millisecond):
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r == nil || !r.Duplicate || r.Job.ID != mine.Job.ID {
			t.Fatalf("after commit: %+v; want duplicate of job %d", r, mine.Job.ID)
		}
	})
}

// A batch commits all or nothing, and reports duplicates per job, also
// within the batch.
func TestEnqueueManyIsAtomic(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		res, err := c.EnqueueMany(ctx, []jobs.EnqueueParams{
			{Args: testArgs{N: 1}, Opts: &jobs.EnqueueOpts{UniqueKey: "a"}},
			{Args: testArgs{N: 2}, Opts: &jobs.EnqueueOpts{UniqueKey: "a"}},
			{Args: testArgs{N: 3}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Duplicate || !res[1].Duplicate || res[1].Job.ID != res[0].Job.ID || res[2].Duplicate {
			t.Fatalf("batch results: %+v %+v %+v", res[0], res[1], res[2])
		}
		// A batch mixing new jobs, a key taken before, a key repeated
		// within it and scheduled jobs.
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		res2, err := c.EnqueueMany(ctx, []jobs.EnqueueParams{
			{Args: testArgs{N: 10}},
			{Args: testArgs{N: 11}, Opts: &jobs.EnqueueOpts{UniqueKey: "a"}},
			{Args: testArgs{N: 12}, Opts: &jobs.EnqueueOpts{UniqueKey: "b", RunAt: at}},
			{Args: testArgs{N: 13}, Opts: &jobs.EnqueueOpts{UniqueKey: "b"}},
			{Args: testArgs{N: 14}, Opts: &jobs.EnqueueOpts{Delay: time.Minute}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantDup := []bool{false, true, false, true, false}
		for i, r := range res2 {
			if r.Duplicate != wantDup[i] {
				t.Fatalf("batch 2 job %d: duplicate=%v, want %v", i, r.Duplicate, wantDup[i])
			}
		}
		if res2[1].Job.ID != res[0].Job.ID || res2[3].Job.ID != res2[2].Job.ID || string(res2[3].Job.Args) != `{"n":12}` ||
			!res2[2].Job.RunAt.Equal(at) || res2[4].Job.RunAt.Sub(res2[4].Job.CreatedAt) != time.Minute || string(res2[0].Job.Args) != `{"n":10}` {
			t.Fatalf("batch 2 results: %+v %+v %+v %+v %+v", res2[0].Job, res2[1].Job, res2[2].Job, res2[3].Job, res2[4].Job)
		}
		_, err = c.EnqueueMany(ctx, []jobs.EnqueueParams{{Args: testArgs{N: 4}}, {Args: testArgs{N: 5}, Opts: &jobs.EnqueueOpts{Delay: -time.Second}}})
		if err == nil {
			t.Fatal("a batch with a bad job was accepted")
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 5 {
			t.Fatalf("%d jobs, want 5 (the bad batch must insert nothing)", n)
		}
	})
}

func TestRawAndTypedArgs(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		raw := []byte{0, 1, 2, 'n', 'o', 't', ' ', 'j', 's', 'o', 'n', 0xff}
		got := make(chan []byte, 1)
		typed := make(chan testArgs, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorkerKind(ws, "bytes", jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[jobs.Raw]) error {
			if j.Args.Name != "bytes" {
				return errors.New("wrong kind " + j.Args.Name)
			}
			got <- j.Args.Data
			return nil
		}))
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			typed <- j.Args
			j.SetResult([]byte("done"))
			return nil
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, jobs.Raw{Name: "bytes", Data: raw}, nil); err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, testArgs{N: 42}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(ctx)
		if b := <-got; string(b) != string(raw) {
			t.Fatalf("raw args came back as %q", b)
		}
		if a := <-typed; a.N != 42 {
			t.Fatalf("typed args came back as %+v", a)
		}
		waitFor(t, 10*time.Second, func() bool { j, _ := c.Get(ctx, r.Job.ID); return j.State == idemtype.JobCompleted })
		if j, _ := c.Get(ctx, r.Job.ID); string(j.Result) != "done" {
			t.Fatalf("result = %q, want done", j.Result)
		}
	})
}
