package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// testResolve covers the operator's decisions: a parked key resolved as
// succeeded replays the given result; a live claim is refused unless forced,
// and a forced resolution fences its holder out.
func testResolve(t *testing.T, s *suite) {
	type env struct {
		f   *fixture
		clk *clock
		l   *idem.Ledger
	}
	setup := func(t *testing.T) env {
		f := s.setup(t)
		clk := newClock()
		return env{f, clk, f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})}
	}
	park := func(t *testing.T, e env, op idem.Op) {
		t.Helper()
		c := mustClaim(t, e.f.ctx, e.l, op, idem.Acquired)
		if err := e.l.Park(e.f.ctx, c); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, e.f.ctx, e.l, op, idem.Parked)
	}
	noRun := func(t *testing.T) idem.Func {
		return func(context.Context, *sql.Tx) ([]byte, error) { t.Error("ran a resolved key"); return nil, nil }
	}

	t.Run("ParkedSucceeded", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		op := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp"}
		park(t, e, op)
		r, err := e.l.Resolve(e.f.ctx, "s", "k", idem.Resolution{As: idemtype.StateSucceeded, Result: idem.Result{Status: 200, Body: []byte("confirmed by operator")}})
		if err != nil || r.State != idemtype.StateSucceeded || r.Attempt != 1 {
			t.Fatalf("resolve: %+v, %v; want succeeded at attempt 1", r, err)
		}
		c := mustClaim(t, e.f.ctx, e.l, op, idem.Replay)
		if string(c.Result.Body) != "confirmed by operator" || c.Result.Status != 200 {
			t.Fatalf("replay %d %q", c.Result.Status, c.Result.Body)
		}
		res, err := e.l.Do(e.f.ctx, op, noRun(t))
		if err != nil || string(res.Body) != "confirmed by operator" {
			t.Fatalf("Do after resolution: %q, %v", res.Body, err)
		}
		if _, err := e.l.Resolve(e.f.ctx, "s", "k", idem.Resolution{As: idemtype.StateReleased}); err == nil || errors.Is(err, idem.ErrLiveLease) {
			t.Fatalf("resolving a completed record: %v, want an error that is not ErrLiveLease", err)
		}
		if r := mustGet(t, e.f.ctx, e.l, "s", "k"); r.State != idemtype.StateSucceeded || string(r.Body) != "confirmed by operator" {
			t.Fatalf("a refused resolution changed the record: %s %q", r.State, r.Body)
		}
	})

	t.Run("ParkedFailed", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		park(t, e, op)
		if _, err := e.l.Resolve(e.f.ctx, "", "k", idem.Resolution{As: idemtype.StateFailed, Result: idem.Result{Status: 402, Body: []byte("refunded")}}); err != nil {
			t.Fatal(err)
		}
		res, err := e.l.Do(e.f.ctx, op, noRun(t))
		if !errors.Is(err, idem.ErrFailed) || string(res.Body) != "refunded" {
			t.Fatalf("Do after resolving as failed: %q, %v; want ErrFailed", res.Body, err)
		}
	})

	t.Run("ParkedReleased", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		park(t, e, op)
		if _, err := e.l.Resolve(e.f.ctx, "", "k", idem.Resolution{As: idemtype.StateReleased}); err != nil {
			t.Fatal(err)
		}
		if c := mustClaim(t, e.f.ctx, e.l, op, idem.Acquired); c.Token != 2 {
			t.Fatalf("claim after resolving as released: token %d, want 2", c.Token)
		}
	})

	t.Run("LiveLease", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		holder := mustClaim(t, e.f.ctx, e.l, op, idem.Acquired)
		before := mustGet(t, e.f.ctx, e.l, "", "k")
		res := idem.Resolution{As: idemtype.StateSucceeded, Result: idem.Result{Body: []byte("forced")}}
		if _, err := e.l.Resolve(e.f.ctx, "", "k", res); !errors.Is(err, idem.ErrLiveLease) {
			t.Fatalf("resolve under a live lease: %v, want ErrLiveLease", err)
		}
		if after := mustGet(t, e.f.ctx, e.l, "", "k"); !sameRecord(before, after) {
			t.Fatalf("a refused resolution changed the record:\nbefore %+v\nafter  %+v", before, after)
		}
		res.Force = true
		if r, err := e.l.Resolve(e.f.ctx, "", "k", res); err != nil || r.State != idemtype.StateSucceeded {
			t.Fatalf("forced resolve: %+v, %v", r, err)
		}
		if err := e.l.Complete(e.f.ctx, holder, idem.Result{Body: []byte("holder")}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("fenced-out holder Complete: %v, want ErrLeaseLost", err)
		}
		if err := e.l.Heartbeat(e.f.ctx, holder); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("fenced-out holder Heartbeat: %v, want ErrLeaseLost", err)
		}
		if c := mustClaim(t, e.f.ctx, e.l, op, idem.Replay); string(c.Result.Body) != "forced" {
			t.Fatalf("replay %q, want the operator's result", c.Result.Body)
		}
	})

	t.Run("StaleLease", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		mustClaim(t, e.f.ctx, e.l, op, idem.Acquired)
		e.clk.Advance(time.Minute)
		if _, err := e.l.Resolve(e.f.ctx, "", "k", idem.Resolution{As: idemtype.StateReleased}); err != nil {
			t.Fatalf("resolve a stale claim without force: %v", err)
		}
		if c := mustClaim(t, e.f.ctx, e.l, op, idem.Acquired); c.Token != 2 {
			t.Fatalf("token %d, want 2", c.Token)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		if _, err := e.l.Resolve(e.f.ctx, "", "missing", idem.Resolution{As: idemtype.StateSucceeded}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("resolve a missing key: %v, want ErrNotFound", err)
		}
		if n := rowCount(t, e.l); n != 0 {
			t.Fatalf("%d rows after resolving a missing key, want 0", n)
		}
	})
}
