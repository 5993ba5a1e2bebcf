package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemdev/idem/jobs"
)

func TestRunsEveryJobOnce(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("w"))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: time.Second, PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var params []jobs.EnqueueParams
		for i := range 200 {
			params = append(params, jobs.EnqueueParams{Args: testArgs{N: i}})
		}
		if _, err := c.EnqueueMany(ctx, params); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return e.count(t, `SELECT count(*) FROM idem_jobs WHERE state = 'completed'`) == 200 })
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 200 {
			t.Fatalf("effects = %d, want 200", n)
		}
		if n := e.count(t, `SELECT count(DISTINCT job_id) FROM effects`); n != 200 {
			t.Fatalf("distinct effects = %d, want 200", n)
		}
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
