package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/crashpoint"
)

// A child process is this test binary re-executed with runChildEnv set to
// a database URL: it books one ride under runChildKey and exits, unless a
// crash point (crashpoint.EnvVar) kills it first.
const (
	runChildEnv = "IDEM_RUN_CHILD_URL"
	runChildKey = "IDEM_RUN_CHILD_KEY"
)

// childLease is the children's lease: short, so the parent resumes soon,
// and long enough for heartbeats to get through under -race on a busy
// machine (a child that loses its lease exits instead of being killed).
const childLease = 2 * time.Second

func newBooking(l *idem.Ledger, h func() hooks) (*idem.Runs, *idem.NamedRun[ride]) {
	runs := idem.NewRuns()
	return runs, idem.AddRun(runs, "book-ride", func(r *idem.Run, in ride) (idem.Result, error) {
		return book(l, r.Op(), h())(r)
	})
}

func runChildMain() int {
	ctx := context.Background()
	l, err := dburl.Open(ctx, os.Getenv(runChildEnv), &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 3
	}
	defer l.Close()
	_, booking := newBooking(l, func() hooks { return hooks{} })
	op := idem.Op{Key: os.Getenv(runChildKey), Fingerprint: "fp", Lease: childLease}
	if _, err := booking.Run(ctx, l, op, ride{ID: op.Key, Amount: 1200}); err != nil {
		fmt.Fprintln(os.Stderr, "child: run:", err)
		return 1
	}
	return 0
}

// TestRunKilled kills a child process at every step boundary (after an
// external step is marked started, after its call, before a transaction
// step's commit, after each checkpoint) and resumes the run, by a client
// retry or by a completer: each effect exists once, and the provider saw
// the charge's key at most twice (a redo after an unrecorded call is
// deduplicated there; the lookup avoids it here).
func TestRunKilled(t *testing.T) {
	points := []string{
		crashpoint.StepBeforeCommit + ":1",    // create-ride written, not committed
		crashpoint.StepAfterCheckpoint + ":1", // create-ride committed
		crashpoint.StepStarted + ":1",         // charge marked started, not called
		crashpoint.StepAfterCall + ":1",       // charged, not checkpointed
		crashpoint.StepAfterCheckpoint + ":2", // charge checkpointed
		crashpoint.StepBeforeCommit + ":2",    // receipt written, not committed
		crashpoint.StepAfterCheckpoint + ":3", // receipt committed, result not stored
	}
	for _, drv := range []string{"sqlite", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			url := dbURL(t, drv)
			f := &runFixture{t: t, url: url}
			l := f.open(nil)
			createRideTables(t, l)
			runs, booking := newBooking(l, func() hooks { return hooks{} })
			for i, p := range points {
				key := fmt.Sprintf("ride-%d", i)
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), runChildEnv+"="+url, runChildKey+"="+key, crashpoint.EnvVar+"="+p)
				out, err := cmd.CombinedOutput()
				if err == nil || !strings.Contains(err.Error(), "signal: killed") {
					t.Fatalf("%s: child ended with %v, want killed: %s", p, err, out)
				}
				waitStale(t, l, key)
				op := idem.Op{Key: key, Fingerprint: "fp"}
				if i%2 == 0 {
					if _, err := booking.Run(t.Context(), l, op, ride{ID: key, Amount: 1200}); err != nil {
						t.Fatalf("%s: resume: %v", p, err)
					}
				} else {
					c := idem.NewCompleter(l, runs, nil)
					if n, err := c.CompleteOnce(t.Context()); err != nil || n != 1 {
						t.Fatalf("%s: completer: %d, %v; want 1 finished", p, n, err)
					}
					res, err := booking.Run(t.Context(), l, op, ride{ID: key, Amount: 1200})
					if err != nil || !res.Replayed {
						t.Fatalf("%s: client retry after the completer: %+v, %v", p, res, err)
					}
				}
				wantOnce(t, l, key)
				if _, _, _, calls := effects(t, l, key); calls != 1 {
					t.Fatalf("%s: %d provider calls, want 1 (the lookup found the charge)", p, calls)
				}
			}
		})
	}
}

// waitStale waits until key's record is in progress with its lease ended
// (by the database clock), or is gone (killed before the claim committed).
func waitStale(t *testing.T, l *idem.Ledger, key string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		rec, err := l.Get(t.Context(), "", key)
		if errors.Is(err, idem.ErrNotFound) || (err == nil && rec.Stale()) {
			return
		}
		time.Sleep(childLease / 4)
	}
	t.Fatalf("%s: still held a minute after the child died", key)
}
