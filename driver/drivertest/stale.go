package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// reconciler is a scripted idem.Reconciler that records what it was asked.
type reconciler struct {
	mu      sync.Mutex
	answers []answer
	asked   []idemtype.Record
}

type answer struct {
	v   idem.Verdict
	res idem.Result
	err error
}

func (r *reconciler) reconcile(_ context.Context, rec idemtype.Record) (idem.Verdict, idem.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, rec)
	if len(r.answers) == 0 {
		return idem.VerdictUnknown, idem.Result{}, errors.New("reconciler asked more often than scripted")
	}
	a := r.answers[0]
	r.answers = r.answers[1:]
	return a.v, a.res, a.err
}

func (r *reconciler) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// staleSetup returns a ledger on an injected clock with the given policy,
// and a key whose holder has vanished (its lease just ended).
func staleSetup(t *testing.T, s *suite, policy idem.StalePolicy, rc *reconciler) (*fixture, *clock, *idem.Ledger, idem.Op) {
	t.Helper()
	const lease = 10 * time.Second
	f := s.setup(t)
	clk := newClock()
	opts := &idem.Options{Clock: clk.Now, Lease: lease, Stale: policy}
	if rc != nil {
		opts.Reconciler = rc.reconcile
	}
	l := f.open(opts)
	op := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp"}
	mustClaim(t, f.ctx, l, op, idem.Acquired)
	clk.Advance(lease)
	return f, clk, l, op
}

// testStalePolicy: what a claim does with a stale in-progress record, per
// policy: Redo reclaims, Park parks for good, Reconcile asks and obeys.
func testStalePolicy(t *testing.T, s *suite) {
	t.Run("Redo", func(t *testing.T) {
		t.Parallel()
		f, _, l, op := staleSetup(t, s, idem.StaleRedo, nil)
		c := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
		if c.Token != 2 {
			t.Fatalf("token %d, want 2", c.Token)
		}
	})

	t.Run("Park", func(t *testing.T) {
		t.Parallel()
		f, clk, l, op := staleSetup(t, s, idem.StalePark, nil)
		c := mustClaim(t, f.ctx, l, op, idem.Parked)
		if c.Record.State != idemtype.StateParked || c.Record.Attempt != 1 {
			t.Fatalf("parked claim record %s attempt %d, want parked at attempt 1", c.Record.State, c.Record.Attempt)
		}
		for range 3 {
			clk.Advance(24 * time.Hour)
			mustClaim(t, f.ctx, l, op, idem.Parked)
		}
		ran := false
		_, err := l.Do(f.ctx, op, func(context.Context, *sql.Tx) ([]byte, error) { ran = true; return nil, nil })
		if !errors.Is(err, idem.ErrParked) || ran {
			t.Fatalf("Do on a parked key: %v (ran %v), want ErrParked without running", err, ran)
		}
		if r := mustGet(t, f.ctx, l, op.Scope, op.Key); r.State != idemtype.StateParked || r.Attempt != 1 {
			t.Fatalf("record %s attempt %d, want parked at attempt 1 (never redone)", r.State, r.Attempt)
		}
	})

	t.Run("PerOp", func(t *testing.T) {
		t.Parallel()
		f, _, l, op := staleSetup(t, s, idem.StaleRedo, nil)
		op.Stale = idem.StalePark
		mustClaim(t, f.ctx, l, op, idem.Parked)
	})

	t.Run("ReconcileDone", func(t *testing.T) {
		t.Parallel()
		rc := &reconciler{answers: []answer{{v: idem.VerdictDone, res: idem.Result{Status: 201, Body: []byte("found downstream")}}}}
		f, clk, l, op := staleSetup(t, s, idem.StaleReconcile, rc)
		c := mustClaim(t, f.ctx, l, op, idem.Replay)
		if string(c.Result.Body) != "found downstream" || c.Result.Status != 201 {
			t.Fatalf("replay %d %q, want the reconciler's result", c.Result.Status, c.Result.Body)
		}
		if rc.calls() != 1 || rc.asked[0].Key != op.Key || rc.asked[0].State != idemtype.StateInProgress {
			t.Fatalf("reconciler asked %d times about %+v", rc.calls(), rc.asked)
		}
		r := mustGet(t, f.ctx, l, op.Scope, op.Key)
		if r.State != idemtype.StateSucceeded || string(r.Body) != "found downstream" || r.Status != 201 {
			t.Fatalf("record %s %d %q, want succeeded with the reconciler's result", r.State, r.Status, r.Body)
		}
		clk.Advance(time.Hour)
		res, err := l.Do(f.ctx, op, func(context.Context, *sql.Tx) ([]byte, error) { t.Error("ran a reconciled key"); return nil, nil })
		if err != nil || string(res.Body) != "found downstream" || !res.Replayed || rc.calls() != 1 {
			t.Fatalf("Do after reconciliation: %q replayed=%v err=%v calls=%d", res.Body, res.Replayed, err, rc.calls())
		}
	})

	t.Run("ReconcileFailedDone", func(t *testing.T) {
		t.Parallel()
		rc := &reconciler{answers: []answer{{v: idem.VerdictFailed, res: idem.Result{Status: 402, Body: []byte("declined downstream")}}}}
		f, _, l, op := staleSetup(t, s, idem.StaleReconcile, rc)
		// The first caller to learn the outcome gets the same answer as
		// every later one: a permanent failure.
		for i := range 2 {
			res, err := l.Do(f.ctx, op, func(context.Context, *sql.Tx) ([]byte, error) { t.Error("ran a reconciled key"); return nil, nil })
			if !errors.Is(err, idem.ErrFailed) || string(res.Body) != "declined downstream" {
				t.Fatalf("Do %d after a FailedDone verdict: %q, %v; want ErrFailed with the stored result", i, res.Body, err)
			}
		}
		if r := mustGet(t, f.ctx, l, op.Scope, op.Key); r.State != idemtype.StateFailed {
			t.Fatalf("record %s, want failed", r.State)
		}
	})

	t.Run("ReconcileNotDone", func(t *testing.T) {
		t.Parallel()
		rc := &reconciler{answers: []answer{{v: idem.VerdictNotDone}}}
		f, _, l, op := staleSetup(t, s, idem.StaleReconcile, rc)
		c := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
		if c.Token != 2 || rc.calls() != 1 {
			t.Fatalf("token %d after %d reconciler calls, want 2 after 1", c.Token, rc.calls())
		}
		if err := l.Complete(f.ctx, c, idem.Result{Body: []byte("redone")}); err != nil {
			t.Fatalf("complete after NotDone: %v", err)
		}
	})

	t.Run("ReconcileUnknown", func(t *testing.T) {
		t.Parallel()
		rc := &reconciler{answers: []answer{{v: idem.VerdictUnknown}}}
		f, clk, l, op := staleSetup(t, s, idem.StaleReconcile, rc)
		c := mustClaim(t, f.ctx, l, op, idem.Parked)
		if c.Record.State != idemtype.StateParked {
			t.Fatalf("claim record %s, want parked", c.Record.State)
		}
		clk.Advance(time.Hour)
		mustClaim(t, f.ctx, l, op, idem.Parked)
		if rc.calls() != 1 {
			t.Fatalf("reconciler asked %d times, want once (parked keys are not asked again)", rc.calls())
		}
		if r := mustGet(t, f.ctx, l, op.Scope, op.Key); r.State != idemtype.StateParked {
			t.Fatalf("record %s, want parked", r.State)
		}
	})

	t.Run("ReconcileError", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("downstream unreachable")
		rc := &reconciler{answers: []answer{{err: boom}, {v: idem.VerdictNotDone}}}
		f, clk, l, op := staleSetup(t, s, idem.StaleReconcile, rc)
		if c, err := l.Claim(f.ctx, op); !errors.Is(err, boom) {
			t.Fatalf("claim with a failing reconciler: %+v, %v; want the reconciler's error", c, err)
		}
		// The claim is left to expire; meanwhile nobody else acts on it.
		r := mustGet(t, f.ctx, l, op.Scope, op.Key)
		if r.State != idemtype.StateInProgress || r.Stale() {
			t.Fatalf("record after a reconciler error: %s stale=%v, want in progress under a live lease", r.State, r.Stale())
		}
		mustClaim(t, f.ctx, l, op, idem.InFlight)
		if rc.calls() != 1 {
			t.Fatalf("reconciler asked %d times before the lease ended, want 1", rc.calls())
		}
		clk.Advance(10 * time.Second)
		c := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
		if rc.calls() != 2 || c.Token != r.Attempt+1 {
			t.Fatalf("after the lease: %d reconciler calls, token %d; want asked again (2) and token %d", rc.calls(), c.Token, r.Attempt+1)
		}
	})
}
