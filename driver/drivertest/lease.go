package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// checkFencedOut asserts that every write of an old holder is refused with
// ErrLeaseLost.
func checkFencedOut(t *testing.T, f *fixture, l *idem.Ledger, old *idem.Claim) {
	t.Helper()
	writes := []struct {
		name string
		do   func() error
	}{
		{"Complete", func() error { return l.Complete(f.ctx, old, idem.Result{Status: 200, Body: []byte("stale holder")}) }},
		{"Heartbeat", func() error { return l.Heartbeat(f.ctx, old) }},
		{"Fail", func() error { return l.Fail(f.ctx, old, idem.Result{Body: []byte("stale failure")}) }},
		{"Release", func() error { return l.Release(f.ctx, old) }},
		{"Park", func() error { return l.Park(f.ctx, old) }},
		{"CompleteTx", func() error {
			tx := begin(t, f.ctx, l)
			defer tx.Rollback()
			return l.CompleteTx(f.ctx, tx, old, idem.Result{Body: []byte("stale tx")})
		}},
	}
	for _, w := range writes {
		if err := w.do(); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("old holder (token %d) %s: %v, want ErrLeaseLost", old.Token, w.name, err)
		}
	}
}

// testLeaseExpiry: once a lease ends (injected clock), the next claim is
// Reclaimed with token+1, and the old holder can change nothing: not before
// the new holder completes, and not after.
func testLeaseExpiry(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: 10 * time.Second})
	op := idem.Op{Key: "lease", Fingerprint: "fp"}

	old := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if !old.LeaseUntil.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("lease until %v, want %v", old.LeaseUntil, t0.Add(10*time.Second))
	}
	clk.Advance(10*time.Second - time.Millisecond)
	mustClaim(t, f.ctx, l, op, idem.InFlight)
	if r := mustGet(t, f.ctx, l, "", op.Key); r.Stale() {
		t.Fatalf("record stale 1ms before its lease ends: %+v", r)
	}
	clk.Advance(time.Millisecond) // lease_until == now: the lease has ended
	if r := mustGet(t, f.ctx, l, "", op.Key); !r.Stale() {
		t.Fatalf("record not stale at the end of its lease: state %s lease until %v now %v", r.State, r.LeaseUntil, r.Now)
	}

	cur := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
	if cur.Token != old.Token+1 {
		t.Fatalf("reclaimed token %d, want %d", cur.Token, old.Token+1)
	}
	checkFencedOut(t, f, l, old)
	r := mustGet(t, f.ctx, l, "", op.Key)
	if r.State != idemtype.StateInProgress || r.Attempt != cur.Token || len(r.Body) != 0 || !r.LeaseUntil.Equal(cur.LeaseUntil) {
		t.Fatalf("after the old holder's writes: state %s attempt %d body %q lease %v; want in_progress, %d, no result, %v",
			r.State, r.Attempt, r.Body, r.LeaseUntil, cur.Token, cur.LeaseUntil)
	}

	if err := l.Complete(f.ctx, cur, idem.Result{Status: 200, Body: []byte("new holder")}); err != nil {
		t.Fatalf("new holder complete: %v", err)
	}
	checkFencedOut(t, f, l, old)
	if err := l.Complete(f.ctx, cur, idem.Result{Body: []byte("twice")}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second Complete by the new holder: %v, want ErrLeaseLost", err)
	}
	c := mustClaim(t, f.ctx, l, op, idem.Replay)
	if string(c.Result.Body) != "new holder" || c.Record.Attempt != 2 {
		t.Fatalf("replay %q attempt %d, want the new holder's result at attempt 2", c.Result.Body, c.Record.Attempt)
	}

	// A lease that ended is lost even when nobody took the key over.
	op2 := idem.Op{Key: "lapsed", Fingerprint: "fp"}
	lapsed := mustClaim(t, f.ctx, l, op2, idem.Acquired)
	clk.Advance(10 * time.Second)
	if err := l.Complete(f.ctx, lapsed, idem.Result{Body: []byte("late")}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete after the lease ended: %v, want ErrLeaseLost", err)
	}
	if r := mustGet(t, f.ctx, l, "", op2.Key); !r.Stale() || r.Attempt != 1 || len(r.Body) != 0 {
		t.Fatalf("lapsed record: %s attempt %d body %q stale %v; want a stale in_progress record without result", r.State, r.Attempt, r.Body, r.Stale())
	}
}

// testLeaseExpiryDatabaseClock is LeaseExpiry on the real database clock,
// with a short lease: wait until the database says the record is stale.
func testLeaseExpiryDatabaseClock(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	op := idem.Op{Key: "lease", Fingerprint: "fp", Lease: 300 * time.Millisecond}

	old := mustClaim(t, f.ctx, l, op, idem.Acquired)
	waitFor(t, "the database clock to pass the lease", func() bool { return mustGet(t, f.ctx, l, "", op.Key).Stale() })
	cur := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
	if cur.Token != old.Token+1 {
		t.Fatalf("reclaimed token %d, want %d", cur.Token, old.Token+1)
	}
	if err := l.Complete(f.ctx, old, idem.Result{Body: []byte("old")}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old holder Complete: %v, want ErrLeaseLost", err)
	}
	if err := l.Heartbeat(f.ctx, old); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old holder Heartbeat: %v, want ErrLeaseLost", err)
	}
	if r := mustGet(t, f.ctx, l, "", op.Key); r.Attempt != cur.Token || r.State != idemtype.StateInProgress || len(r.Body) != 0 {
		t.Fatalf("record %s attempt %d body %q, want in_progress attempt %d without result", r.State, r.Attempt, r.Body, cur.Token)
	}
}

// testHeartbeat: a heartbeat extends the lease from the clock's now, and
// the claim is stale exactly when the extended lease ends.
func testHeartbeat(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: 10 * time.Second})
	op := idem.Op{Key: "hb", Fingerprint: "fp"}

	c := mustClaim(t, f.ctx, l, op, idem.Acquired)
	clk.Advance(6 * time.Second)
	if err := l.Heartbeat(f.ctx, c); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if want := t0.Add(16 * time.Second); !c.LeaseUntil.Equal(want) {
		t.Fatalf("lease until %v after heartbeat, want %v", c.LeaseUntil, want)
	}
	clk.Advance(6 * time.Second) // past the original lease
	mustClaim(t, f.ctx, l, op, idem.InFlight)
	clk.Advance(4 * time.Second) // exactly the extended lease
	if err := l.Heartbeat(f.ctx, c); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("heartbeat at the end of the lease: %v, want ErrLeaseLost", err)
	}
	c2 := mustClaim(t, f.ctx, l, op, idem.Reclaimed)
	if c2.Token != 2 {
		t.Fatalf("reclaimed token %d, want 2", c2.Token)
	}
}

// testPausedHolder: a child holding a claim is SIGSTOPped for more than
// twice its lease; the parent reclaims; after SIGCONT the child's Complete
// is refused with ErrLeaseLost, both after the parent completed (the record
// is no longer in progress) and while the parent still holds the key (only
// the fencing token tells the two holders apart). The parent's result is
// the only one stored.
func testPausedHolder(t *testing.T, s *suite) {
	for _, parentFirst := range []bool{true, false} {
		name := "ResumeAfterParentCompleted"
		if !parentFirst {
			name = "ResumeWhileParentHolds"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pausedHolder(t, s, parentFirst)
		})
	}
}

func pausedHolder(t *testing.T, s *suite, parentFirst bool) {
	const lease = 500 * time.Millisecond
	f := s.setup(t)
	l := f.open(nil)
	// The parent's lease is long: the child must be refused by the token,
	// not because the parent's lease happened to run out too.
	op := idem.Op{Key: "paused", Fingerprint: "fp", Lease: lease}

	ch := startChild(t, "hold", childArgs{Target: f.target.Name, DB: f.db, Keys: []string{op.Key}, LeaseMS: lease.Milliseconds(), Body: "child"})
	if e := ch.next(t, "claimed"); e.Outcome != idem.Acquired.String() || e.Token != 1 {
		t.Fatalf("child claimed %+v, want acquired with token 1", e)
	}
	ch.stop(t)
	// Paused for at least twice the lease, by the database clock.
	waitFor(t, "the database clock to pass twice the lease", func() bool {
		r := mustGet(t, f.ctx, l, "", op.Key)
		return r.Stale() && !r.Now.Before(r.LeaseUntil.Add(lease))
	})
	parentOp := op
	parentOp.Lease = time.Hour
	c := mustClaim(t, f.ctx, l, parentOp, idem.Reclaimed)
	if c.Token != 2 {
		t.Fatalf("parent reclaimed with token %d, want 2", c.Token)
	}
	complete := func() {
		t.Helper()
		if err := l.Complete(f.ctx, c, idem.Result{Status: 200, Body: []byte("parent")}); err != nil {
			t.Fatalf("parent complete: %v", err)
		}
	}
	if parentFirst {
		complete()
	}
	if _, err := ch.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	ch.cont(t)
	e := ch.next(t, "complete")
	if !e.LeaseLost {
		t.Fatalf("resumed child's Complete: %q, want ErrLeaseLost", e.Err)
	}
	ch.mustExitZero(t)
	if !parentFirst {
		if r := mustGet(t, f.ctx, l, "", op.Key); r.State != idemtype.StateInProgress || r.Attempt != 2 || len(r.Body) != 0 {
			t.Fatalf("record after the child's refused Complete: %s attempt %d body %q; want the parent's claim untouched", r.State, r.Attempt, r.Body)
		}
		complete()
	}

	r := mustGet(t, f.ctx, l, "", op.Key)
	if r.State != idemtype.StateSucceeded || string(r.Body) != "parent" || r.Attempt != 2 {
		t.Fatalf("record %s attempt %d body %q; want succeeded at attempt 2 with the parent's result", r.State, r.Attempt, r.Body)
	}
}
