package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// When another worker takes a job over (simulated here by changing the
// lease id under the holder), the holder's next heartbeat is fenced out
// and its context is cancelled with ErrLeaseLost; its completion changes
// nothing.
func TestLostLeaseCancelsTheJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// Buffered: if a stall lets the lease expire on its own, the job
		// may run again, and its handler must not block Stop.
		started := make(chan int64, 10)
		cause, completion := make(chan error, 10), make(chan error, 10)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			started <- j.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			err := completeWithEffect(context.WithoutCancel(ctx), j, "stale")
			completion <- err
			return err
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: time.Second, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
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
		e.exec(t, `UPDATE idem_jobs SET lease_id = lease_id + 1 WHERE id = ?`, id)
		if err := <-cause; !errors.Is(err, jobs.ErrLeaseLost) {
			t.Fatalf("context cause = %v, want ErrLeaseLost", err)
		}
		if err := <-completion; !errors.Is(err, jobs.ErrLeaseLost) {
			t.Fatalf("completion after the lease was lost: %v, want ErrLeaseLost", err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 0 {
			t.Fatalf("a worker that lost its lease wrote %d effects", n)
		}
	})
}

// A job running for several leases keeps its claim by heartbeating: a
// second worker polling the same queue never takes it over.
func TestHeartbeatKeepsLongJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const lease = time.Second
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			select {
			case <-time.After(3 * lease):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			return completeWithEffect(ctx, j, "long")
		}))
		var clients []*jobs.Client
		for range 2 {
			c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: lease, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		r, err := clients[0].Enqueue(ctx, testArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clients {
			c.Start(ctx)
			defer c.Stop(ctx)
		}
		waitFor(t, 30*time.Second, func() bool { j, _ := clients[0].Get(ctx, r.Job.ID); return j.State == idemtype.JobCompleted })
		if j, _ := clients[0].Get(ctx, r.Job.ID); j.Attempt != 1 || len(j.Errors) != 0 {
			t.Fatalf("long job: attempt %d, errors %+v; want one uninterrupted attempt", j.Attempt, j.Errors)
		}
	})
}
