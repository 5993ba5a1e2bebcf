package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// TestCompleteRuns: a registered run abandoned after its first step (the
// second failed, and its caller never retries) is finished by the jobs
// client's periodic completer sweep: each step's effect exactly once.
func TestCompleteRuns(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		e.exec(t, `CREATE TABLE run_effects (key TEXT NOT NULL, step TEXT NOT NULL)`)
		var failing atomic.Bool
		failing.Store(true)
		errFlaky := errors.New("flaky")
		step := func(r *idem.Run, name string) error {
			_, err := idem.TxStep(r, name, func(ctx context.Context, tx *sql.Tx) (bool, error) {
				if name == "second" && failing.Load() {
					return false, errFlaky
				}
				_, err := tx.ExecContext(ctx, e.q(`INSERT INTO run_effects (key, step) VALUES (?, ?)`), r.Op().Key, name)
				return true, err
			})
			return err
		}
		runs := idem.NewRuns()
		book := idem.AddRun(runs, "two-steps/v1", func(r *idem.Run, in string) (idem.Result, error) {
			for _, name := range []string{"first", "second"} {
				if err := step(r, name); err != nil {
					return idem.Result{}, err
				}
			}
			return idem.Result{Status: 200, Body: []byte(in)}, nil
		})
		ctx := t.Context()
		op := idem.Op{Key: "abandoned", Fingerprint: "fp"}
		if _, err := book.Run(ctx, e.l, op, "in"); !errors.Is(err, errFlaky) {
			t.Fatal(err)
		}
		failing.Store(false)

		ws := jobs.NewWorkers()
		sweep := jobs.CompleteRuns(ws, idem.NewCompleter(e.l, runs, nil), jobs.Every(100*time.Millisecond))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PeriodicJobs: []jobs.PeriodicJob{sweep},
			Lease: 5 * time.Second, PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(context.WithoutCancel(ctx))
		deadline := time.Now().Add(time.Minute)
		for {
			rec, err := e.l.Get(ctx, "", op.Key)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State == idemtype.StateSucceeded {
				if string(rec.Body) != "in" {
					t.Fatalf("stored result %q", rec.Body)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run is still %s after a minute of sweeps", rec.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, name := range []string{"first", "second"} {
			if n := e.count(t, `SELECT count(*) FROM run_effects WHERE key = ? AND step = ?`, op.Key, name); n != 1 {
				t.Errorf("step %s: %d effects, want 1", name, n)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs WHERE kind = ?`, jobs.CompleteRunsArgs{}.Kind()); n < 1 {
			t.Errorf("%d sweep jobs, want at least 1", n)
		}
	})
}
