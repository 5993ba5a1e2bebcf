package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// Metadata is stored compacted with the job, by every enqueue path, and
// must be a JSON object; the partition key comes back too.
func TestMetadataIsStored(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		meta := json.RawMessage(`{ "tenant": "acme",  "n": 1 }`)
		one, err := c.Enqueue(ctx, testArgs{N: 1}, &jobs.EnqueueOpts{Metadata: meta, PartitionKey: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		many, err := c.EnqueueMany(ctx, []jobs.EnqueueParams{
			{Args: testArgs{N: 2}, Opts: &jobs.EnqueueOpts{Metadata: meta}},
			{Args: testArgs{N: 3}},
		})
		if err != nil {
			t.Fatal(err)
		}
		fast, err := c.EnqueueManyFast(ctx, []jobs.EnqueueParams{{Args: testArgs{N: 4}, Opts: &jobs.EnqueueOpts{Metadata: meta, PartitionKey: "p"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{one.Job.ID, many[0].Job.ID, fast[0]} {
			j, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(j.Metadata, &got); err != nil || got["tenant"] != "acme" || got["n"] != 1.0 {
				t.Fatalf("job %d metadata %q (%v)", id, j.Metadata, err)
			}
		}
		if j, _ := c.Get(ctx, many[1].Job.ID); j.Metadata != nil || j.PartitionKey != "" {
			t.Fatalf("job without metadata: %q, partition %q", j.Metadata, j.PartitionKey)
		}
		if j, _ := c.Get(ctx, one.Job.ID); j.PartitionKey != "acme" {
			t.Fatalf("partition key %q, want acme", j.PartitionKey)
		}
		for _, bad := range []string{`[1]`, `"s"`, `{"a":`, `null`} {
			if _, err := c.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{Metadata: json.RawMessage(bad)}); !errors.Is(err, idem.ErrInvalid) {
				t.Fatalf("metadata %s: err = %v, want ErrInvalid", bad, err)
			}
		}
	})
}

// Output recorded by the worker is stored with the completion, by Work
// returning nil and inside CompleteTx's transaction; after CompleteTx it
// is refused; outside a job it is refused.
func TestRecordOutput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		late := make(chan error, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			if err := jobs.RecordOutput(ctx, map[string]int{"out": j.Args.N}); err != nil {
				return err
			}
			if j.Args.N == 2 { // in a transaction with an effect
				tx, err := j.DB().BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if err := j.CompleteTx(ctx, tx); err != nil {
					return err
				}
				late <- jobs.RecordOutput(ctx, "too late")
				return tx.Commit()
			}
			return nil
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for n := 1; n <= 2; n++ {
			r, err := c.Enqueue(ctx, testArgs{N: n}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Job.ID)
		}
		runUntil(t, c, func() bool { cs, _ := c.Counts(ctx, ""); return cs[idemtype.JobCompleted] == 2 })
		for i, id := range ids {
			j, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"out":` + string(rune('1'+i)) + `}`; string(j.Result) != want {
				t.Fatalf("job %d output %q, want %s", id, j.Result, want)
			}
		}
		if err := <-late; err == nil {
			t.Fatal("RecordOutput after CompleteTx succeeded")
		}
		if err := jobs.RecordOutput(ctx, 1); err == nil {
			t.Fatal("RecordOutput outside a job succeeded")
		}
	})
}

// A worker that lost its lease records no output: its completion, which
// carries the output, is refused, and the job's result stays empty.
func TestRecordOutputAfterLeaseLostIsRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		started := make(chan int64, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			started <- j.ID
			<-ctx.Done() // the heartbeat finds the lease lost
			if err := jobs.RecordOutput(ctx, "stale"); err != nil {
				return err
			}
			return nil
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
		id := <-started
		takeOver(t, e, id)
		if got := <-log.runs; got != jobs.RunLeaseLost {
			t.Fatalf("run outcome %q, want lease_lost", got)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != idemtype.JobRunning || j.Result != nil {
			t.Fatalf("a stale worker's output was recorded: state %s, result %q", j.State, j.Result)
		}
	})
}
