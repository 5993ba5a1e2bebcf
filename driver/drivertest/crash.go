package drivertest

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
)

// testCrash: a child runs l.Do, whose Func writes an effect row, and is
// SIGKILLed at a crash point. Afterwards the ledger and the effects agree:
// before the commit neither the effect nor the done mark exists and the key
// is recoverable after its lease; after the commit the retry replays. In
// the end there is exactly one effect.
//
// Parent and child share an injected clock stuck at t0 (the child's never
// moves), so "before the lease ends" and "after" are exact.
func testCrash(t *testing.T, s *suite) {
	for _, point := range []string{crashpoint.AfterClaim, crashpoint.BeforeCommit, crashpoint.AfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			const lease = time.Minute
			f := s.setup(t)
			clk := newClock()
			l := f.open(&idem.Options{Clock: clk.Now, Lease: lease})
			createEffects(t, l)
			op := idem.Op{Scope: "crash", Key: "order-1", Fingerprint: "fp"}

			ch := startChild(t, "do", childArgs{Target: f.target.Name, DB: f.db, Scope: op.Scope, Keys: []string{op.Key},
				LeaseMS: lease.Milliseconds(), ClockMS: t0.UnixMilli(), Body: "child result"},
				crashpoint.EnvVar+"="+point)
			ch.mustBeKilled(t)

			var ran atomic.Int32
			fn := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				ran.Add(1)
				return []byte("parent result"), insertEffect(ctx, l, tx, op.Scope, op.Key, 0)
			}

			if point == crashpoint.AfterCommit {
				r := mustGet(t, f.ctx, l, op.Scope, op.Key)
				if r.State != idemtype.StateSucceeded || string(r.Body) != "child result" {
					t.Fatalf("after a crash after commit: record %s body %q, want succeeded with the child's result", r.State, r.Body)
				}
				res, err := l.Do(f.ctx, op, fn)
				if err != nil || !res.Replayed || string(res.Body) != "child result" || ran.Load() != 0 {
					t.Fatalf("retry: %q replayed=%v err=%v ran=%d; want the child's result replayed", res.Body, res.Replayed, err, ran.Load())
				}
			} else {
				if n := effects(t, l, op.Scope)[op.Key]; n != 0 {
					t.Fatalf("%d effect rows after a crash before commit, want 0", n)
				}
				r := mustGet(t, f.ctx, l, op.Scope, op.Key)
				if r.State != idemtype.StateInProgress || r.Attempt != 1 || len(r.Body) != 0 || !r.CompletedAt.IsZero() {
					t.Fatalf("record %s attempt %d body %q completed %v; want in_progress attempt 1, no done mark", r.State, r.Attempt, r.Body, r.CompletedAt)
				}
				// Under the dead holder's lease the key stays taken.
				mustClaim(t, f.ctx, l, op, idem.InFlight)
				clk.Advance(lease - time.Millisecond)
				mustClaim(t, f.ctx, l, op, idem.InFlight)
				clk.Advance(time.Millisecond)
				c := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
				if c.Token != 2 {
					t.Fatalf("reclaimed token %d, want 2", c.Token)
				}
				if err := completeWithEffect(f.ctx, l, c, idem.Result{Body: []byte("parent result")}); err != nil {
					t.Fatalf("complete the reclaimed claim: %v", err)
				}
				res, err := l.Do(f.ctx, op, fn)
				if err != nil || !res.Replayed || string(res.Body) != "parent result" || ran.Load() != 0 {
					t.Fatalf("retry: %q replayed=%v err=%v ran=%d; want the recovered result replayed", res.Body, res.Replayed, err, ran.Load())
				}
			}
			if got := effects(t, l, op.Scope); got[op.Key] != 1 || len(got) != 1 {
				t.Fatalf("effects %v, want exactly one", got)
			}
		})
	}
}
