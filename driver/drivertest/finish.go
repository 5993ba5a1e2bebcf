package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// testRelease: a released key starts clean: the next claim is Acquired with
// token+1, even with another fingerprint, and the released holder is out.
func testRelease(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	op := idem.Op{Key: "k", Fingerprint: "fp-a"}
	c1 := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if err := l.Release(f.ctx, c1); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, f.ctx, l, "", "k"); r.State != idemtype.StateReleased || r.Attempt != 1 {
		t.Fatalf("record %s attempt %d, want released at attempt 1", r.State, r.Attempt)
	}
	op.Fingerprint = "fp-b"
	c2 := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if c2.Token != 2 || c2.Record.Fingerprint != "fp-b" {
		t.Fatalf("claim after release: token %d fingerprint %q, want 2 and fp-b", c2.Token, c2.Record.Fingerprint)
	}
	for _, err := range []error{l.Release(f.ctx, c1), l.Complete(f.ctx, c1, idem.Result{}), l.Heartbeat(f.ctx, c1)} {
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("released holder's write: %v, want ErrLeaseLost", err)
		}
	}
	if err := l.Complete(f.ctx, c2, idem.Result{Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
}

// testFail: a permanent failure is stored and replayed like a success; Do
// reports it as ErrFailed with the stored result, without running.
func testFail(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	op := idem.Op{Key: "k", Fingerprint: "fp"}
	c := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if err := l.Fail(f.ctx, c, idem.Result{Status: 422, Body: []byte("card declined")}); err != nil {
		t.Fatal(err)
	}
	r := mustClaim(t, f.ctx, l, op, idem.Replay)
	if r.Record.State != idemtype.StateFailed || r.Result.Status != 422 || string(r.Result.Body) != "card declined" {
		t.Fatalf("replay of a failure: state %s %d %q", r.Record.State, r.Result.Status, r.Result.Body)
	}
	res, err := l.Do(f.ctx, op, func(context.Context, *sql.Tx) ([]byte, error) { t.Error("ran a failed key"); return nil, nil })
	if !errors.Is(err, idem.ErrFailed) || string(res.Body) != "card declined" || res.Status != 422 {
		t.Fatalf("Do on a failed key: %d %q, %v; want ErrFailed with the stored result", res.Status, res.Body, err)
	}
}

// testDo covers Do's endings: permanent error, ordinary error, panic, lost
// lease, success and replay. The effect written with tx exists exactly when
// the done mark does.
func testDo(t *testing.T, s *suite) {
	t.Run("Permanent", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		declined := errors.New("card declined")
		var ran atomic.Int32
		fn := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			ran.Add(1)
			if err := insertEffect(ctx, l, tx, "", op.Key, 0); err != nil {
				return nil, err
			}
			return nil, idem.Permanent(declined)
		}
		res, err := l.Do(f.ctx, op, fn)
		if !errors.Is(err, idem.ErrFailed) || !errors.Is(err, declined) || string(res.Body) != "card declined" {
			t.Fatalf("Do with a permanent error: %q, %v; want ErrFailed wrapping the error, its message stored", res.Body, err)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects after a permanent failure, want the effect rolled back", n)
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateFailed || string(r.Body) != "card declined" {
			t.Fatalf("record %s %q, want failed with the error message", r.State, r.Body)
		}
		res, err = l.Do(f.ctx, op, fn)
		if !errors.Is(err, idem.ErrFailed) || string(res.Body) != "card declined" || ran.Load() != 1 {
			t.Fatalf("retry: %q, %v, ran %d; want the failure replayed without running", res.Body, err, ran.Load())
		}
	})

	t.Run("Retryable", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		later := errors.New("try later")
		var ran atomic.Int32
		fn := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			n := ran.Add(1)
			if err := insertEffect(ctx, l, tx, "", op.Key, int64(n)); err != nil {
				return nil, err
			}
			if n == 1 {
				return nil, later
			}
			return []byte("ok"), nil
		}
		if _, err := l.Do(f.ctx, op, fn); !errors.Is(err, later) || errors.Is(err, idem.ErrFailed) {
			t.Fatalf("Do with an ordinary error: %v, want that error, not ErrFailed", err)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects after an ordinary error, want the effect rolled back", n)
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateReleased || r.Attempt != 1 {
			t.Fatalf("record %s attempt %d, want released at attempt 1", r.State, r.Attempt)
		}
		res, err := l.Do(f.ctx, op, fn)
		if err != nil || res.Replayed || string(res.Body) != "ok" {
			t.Fatalf("retry: %q replayed=%v %v; want a fresh run", res.Body, res.Replayed, err)
		}
		res, err = l.Do(f.ctx, op, fn)
		if err != nil || !res.Replayed || string(res.Body) != "ok" || ran.Load() != 2 {
			t.Fatalf("third call: %q replayed=%v %v ran %d; want the replay", res.Body, res.Replayed, err, ran.Load())
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateSucceeded || r.Attempt != 2 {
			t.Fatalf("record %s attempt %d, want succeeded at attempt 2", r.State, r.Attempt)
		}
		if n := effects(t, l, "")[op.Key]; n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("recovered %v, want the Func's panic", p)
				}
			}()
			l.Do(f.ctx, op, func(context.Context, *sql.Tx) ([]byte, error) { panic("boom") })
		}()
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateReleased {
			t.Fatalf("record %s after a panic, want released", r.State)
		}
		if c := mustClaim(t, f.ctx, l, op, idem.Acquired); c.Token != 2 {
			t.Fatalf("token %d, want 2", c.Token)
		}
	})

	t.Run("LeaseLost", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		clk := newClock()
		l := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		_, err := l.Do(f.ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if err := insertEffect(ctx, l, tx, "", op.Key, 1); err != nil {
				return nil, err
			}
			clk.Advance(time.Minute) // the work outlived its lease
			return []byte("too late"), nil
		})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Do whose lease ended before commit: %v, want ErrLeaseLost", err)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects, want the effect rolled back with the refused done mark", n)
		}
		r := mustGet(t, f.ctx, l, "", op.Key)
		if !r.Stale() || len(r.Body) != 0 {
			t.Fatalf("record %s body %q stale=%v, want a stale claim without result", r.State, r.Body, r.Stale())
		}
		mustClaim(t, f.ctx, l, op, idem.Reclaimed)
	})

	// Do heartbeats while fn works; when the lease is lost anyway (here the
	// clock jumps past it), fn's context is cancelled with ErrLeaseLost and
	// nothing commits.
	t.Run("LeaseLostDuringWork", func(t *testing.T) {
		t.Parallel()
		if strings.HasPrefix(s.target.Name, "sqlite") {
			t.Skip("documented exception: on SQLite fn's transaction holds the single writer, so Do cannot heartbeat while fn runs")
		}
		f := s.setup(t)
		clk := newClock()
		const lease = 300 * time.Millisecond
		l := f.open(&idem.Options{Clock: clk.Now, Lease: lease})
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		_, err := l.Do(f.ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if err := insertEffect(ctx, l, tx, "", op.Key, 1); err != nil {
				return nil, err
			}
			clk.Advance(lease)
			select {
			case <-ctx.Done(): // the next heartbeat finds the lease lost
				return nil, ctx.Err()
			case <-time.After(time.Minute):
				return nil, errors.New("fn's context was not cancelled after the lease was lost")
			}
		})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Do whose lease was lost during the work: %v, want ErrLeaseLost", err)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects, want 0", n)
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); !r.Stale() {
			t.Fatalf("record %s stale=%v, want a stale claim left to the next caller", r.State, r.Stale())
		}
	})

	// The client goes away after the work is done: the write that finishes
	// the key must not depend on the request's context, so the effect and
	// the done mark commit, and the key is not left stuck until its lease
	// ends.
	t.Run("ClientGoneAfterWork", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		ctx, cancel := context.WithCancel(f.ctx)
		res, err := l.Do(ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if err := insertEffect(ctx, l, tx, "", op.Key, 1); err != nil {
				return nil, err
			}
			cancel()
			return []byte("done"), nil
		})
		if err != nil || string(res.Body) != "done" {
			t.Fatalf("Do whose caller left after the work: %q, %v; want the result", res.Body, err)
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateSucceeded {
			t.Fatalf("record %s, want succeeded", r.State)
		}
		if n := effects(t, l, "")[op.Key]; n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	// The client goes away while the work runs and the work stops: nothing
	// is written and the key is released at once, not held for a lease.
	t.Run("ClientGoneDuringWork", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		ctx, cancel := context.WithCancel(f.ctx)
		_, err := l.Do(ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			cancel()
			if err := insertEffect(ctx, l, tx, "", op.Key, 1); err != nil {
				return nil, err
			}
			return nil, ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do whose caller left during the work: %v, want context.Canceled", err)
		}
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateReleased {
			t.Fatalf("record %s, want released", r.State)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects, want 0", n)
		}
		mustClaim(t, f.ctx, l, op, idem.Acquired)
	})
}
