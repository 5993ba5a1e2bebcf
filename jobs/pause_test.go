package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// A queue paused by an operator's client runs nothing on two worker
// clients (two pools), while a job already running when the pause came
// runs to completion; resume runs the rest.
func TestPausedQueueRunsNothing(t *testing.T) {
	const n = 6
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := newProducer(t, e)
		release := make(chan struct{})
		started := make(chan int64, n+1)
		var workers []*jobs.Client
		for i, l := range []*idem.Ledger{e.l, openLedger(t, e.url)} {
			ws := jobs.NewWorkers()
			effect := effectWorker([]string{"a", "b"}[i])
			jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
				started <- j.ID
				if j.Args.N == 0 {
					<-release
				}
				return effect.Work(ctx, j)
			}))
			c, err := jobs.New(l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Stop(ctx) })
			workers = append(workers, c)
		}
		long, err := op.Enqueue(ctx, testArgs{N: 0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id := <-started; id != long.Job.ID {
			t.Fatalf("started job %d, want %d", id, long.Job.ID)
		}
		q, err := op.Pause(ctx, jobs.DefaultQueue)
		if err != nil || !q.Paused || q.PausedAt.IsZero() {
			t.Fatalf("pause: %+v, %v", q, err)
		}
		again, err := op.Pause(ctx, jobs.DefaultQueue)
		if err != nil || !again.PausedAt.Equal(q.PausedAt) {
			t.Fatalf("pausing again moved PausedAt: %+v, %v", again, err)
		}
		for i := 1; i <= n; i++ {
			if _, err := op.Enqueue(ctx, testArgs{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		close(release)
		waitFor(t, 30*time.Second, func() bool {
			r, err := op.Get(ctx, long.Job.ID)
			return err == nil && r.State == idemtype.JobCompleted
		})
		// Ten poll intervals of both clients (each also woken by the
		// enqueues and the freed slot): nothing may start.
		time.Sleep(10 * 20 * time.Millisecond)
		if got := len(started); got != 0 {
			t.Fatalf("%d jobs started on a paused queue", got)
		}
		if c := e.count(t, `SELECT count(*) FROM effects`); c != 1 {
			t.Fatalf("%d effects while paused, want 1 (the job running at the pause)", c)
		}
		qs, err := workers[1].Queues(ctx)
		if err != nil || len(qs) != 1 || qs[0].Name != jobs.DefaultQueue || !qs[0].Paused ||
			qs[0].Counts[idemtype.JobAvailable] != n || qs[0].Counts[idemtype.JobCompleted] != 1 {
			t.Fatalf("queues seen by another client: %+v, %v", qs, err)
		}

		if q, err := op.Resume(ctx, jobs.DefaultQueue); err != nil || q.Paused || !q.PausedAt.IsZero() {
			t.Fatalf("resume: %+v, %v", q, err)
		}
		waitFor(t, 30*time.Second, func() bool { return e.count(t, `SELECT count(*) FROM effects`) == n+1 })
		if _, err := op.Pause(ctx, "no spaces"); !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("pause of a bad queue name: %v; want ErrInvalid", err)
		}
	})
}
