package drivertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// expectExpired asserts that claiming op is refused as a late replay.
func expectExpired(t *testing.T, f *fixture, l *idem.Ledger, op idem.Op, wantState idemtype.State) idemtype.Record {
	t.Helper()
	c, err := l.Claim(f.ctx, op)
	var ce *idem.ConflictError
	if !errors.Is(err, idem.ErrExpired) || !errors.As(err, &ce) {
		t.Fatalf("claim after retention: claim %+v, err %v; want a *ConflictError matching ErrExpired", c, err)
	}
	if ce.Outcome.String() != "expired" || ce.Record.Key != op.Key || ce.Record.Scope != op.Scope || ce.Record.State != wantState || ce.Record.Fingerprint != op.Fingerprint {
		t.Fatalf("expired conflict: outcome %v record %q/%q %s fp %q; want expired, %q/%q %s %q",
			ce.Outcome, ce.Record.Scope, ce.Record.Key, ce.Record.State, ce.Record.Fingerprint, op.Scope, op.Key, wantState, op.Fingerprint)
	}
	return ce.Record
}

// testRetention walks one key through its whole life: replayed during
// retention, refused as expired after it, tombstoned by Prune (result
// dropped, key still known), deleted by Prune after the tombstone window,
// then new again.
func testRetention(t *testing.T, s *suite) {
	const (
		retention = time.Minute
		ttl       = 10 * time.Minute
	)
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Retention: retention, TombstoneTTL: ttl})
	op := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp"}

	c := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if err := l.Complete(f.ctx, c, idem.Result{Status: 201, Body: []byte("receipt")}); err != nil {
		t.Fatal(err)
	}
	r := mustGet(t, f.ctx, l, "s", "k")
	if !r.CompletedAt.Equal(t0) || !r.ExpiresAt.Equal(t0.Add(retention)) || !r.TombstoneUntil.Equal(t0.Add(retention+ttl)) {
		t.Fatalf("completed %v expires %v tombstone until %v; want %v, +%v, +%v", r.CompletedAt, r.ExpiresAt, r.TombstoneUntil, t0, retention, retention+ttl)
	}

	clk.Advance(retention - time.Millisecond)
	if got := mustClaim(t, f.ctx, l, op, idem.Replay); string(got.Result.Body) != "receipt" {
		t.Fatalf("replay before retention ends: %q", got.Result.Body)
	}
	st, err := l.Prune(f.ctx, nil)
	if err != nil || st.Tombstoned != 0 || st.Deleted != 0 {
		t.Fatalf("prune during retention: %+v, %v; want nothing changed", st, err)
	}

	clk.Advance(time.Millisecond) // retention over
	rec := expectExpired(t, f, l, op, idemtype.StateSucceeded)
	if string(rec.Body) != "receipt" {
		t.Errorf("expired conflict before prune carries body %q, want the record as stored", rec.Body)
	}
	st, err = l.Prune(f.ctx, nil)
	if err != nil || st.Tombstoned != 1 || st.Deleted != 0 {
		t.Fatalf("prune after retention: %+v, %v; want 1 tombstoned", st, err)
	}
	r = mustGet(t, f.ctx, l, "s", "k")
	if r.State != idemtype.StateTombstone || len(r.Body) != 0 || r.Status != 0 || r.Fingerprint != "fp" || r.Attempt != 1 {
		t.Fatalf("tombstone: state %s status %d body %q fp %q attempt %d; want tombstone without result, fingerprint kept",
			r.State, r.Status, r.Body, r.Fingerprint, r.Attempt)
	}
	expectExpired(t, f, l, op, idemtype.StateTombstone)
	if r2 := mustGet(t, f.ctx, l, "s", "k"); !sameRecord(r, r2) {
		t.Fatalf("an expired claim changed the tombstone:\n%+v\n%+v", r, r2)
	}

	clk.Advance(ttl - time.Millisecond)
	expectExpired(t, f, l, op, idemtype.StateTombstone)
	if st, err := l.Prune(f.ctx, nil); err != nil || st.Deleted != 0 || st.Tombstoned != 0 {
		t.Fatalf("prune inside the tombstone window: %+v, %v; want nothing changed", st, err)
	}
	clk.Advance(time.Millisecond)
	st, err = l.Prune(f.ctx, nil)
	if err != nil || st.Deleted != 1 {
		t.Fatalf("prune after the tombstone window: %+v, %v; want 1 deleted", st, err)
	}
	if _, err := l.Get(f.ctx, "s", "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("get after deletion: %v, want ErrNotFound", err)
	}
	if c := mustClaim(t, f.ctx, l, op, idem.Acquired); c.Token != 1 {
		t.Fatalf("fresh claim after deletion: token %d, want 1", c.Token)
	}

	// Past the tombstone window a key is new even before Prune runs: the
	// claim takes the row over with the next token.
	op2 := idem.Op{Scope: "s", Key: "unpruned", Fingerprint: "fp"}
	c = mustClaim(t, f.ctx, l, op2, idem.Acquired)
	if err := l.Fail(f.ctx, c, idem.Result{Body: []byte("declined")}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(retention + ttl)
	op2.Fingerprint = "another request"
	if c := mustClaim(t, f.ctx, l, op2, idem.Acquired); c.Token != 2 || c.Record.Fingerprint != "another request" || len(c.Record.Body) != 0 {
		t.Fatalf("claim past the tombstone window: token %d fp %q body %q; want 2, the new fingerprint, no result", c.Token, c.Record.Fingerprint, c.Record.Body)
	}
}

// testTombstoneDisabled: with TombstoneTTL -1 a key is simply new once its
// retention ends.
func testTombstoneDisabled(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Retention: time.Minute, TombstoneTTL: -1})
	op := idem.Op{Key: "k", Fingerprint: "fp"}
	c := mustClaim(t, f.ctx, l, op, idem.Acquired)
	if err := l.Complete(f.ctx, c, idem.Result{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Millisecond)
	mustClaim(t, f.ctx, l, op, idem.Replay)
	clk.Advance(time.Millisecond)
	if c := mustClaim(t, f.ctx, l, op, idem.Acquired); c.Token != 2 {
		t.Fatalf("claim after retention without tombstones: token %d, want 2", c.Token)
	}
}

// testPruneBatches: Prune works in batches of BatchSize and reports each.
func testPruneBatches(t *testing.T, s *suite) {
	const n, size = 7, 3
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Retention: time.Minute, TombstoneTTL: time.Hour})
	for i := range n {
		c := mustClaim(t, f.ctx, l, idem.Op{Key: fmt.Sprintf("k%d", i)}, idem.Acquired)
		if err := l.Complete(f.ctx, c, idem.Result{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	var progress []idem.PruneStats
	st, err := l.Prune(f.ctx, &idem.PruneOptions{BatchSize: size, Progress: func(s idem.PruneStats) { progress = append(progress, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Tombstoned != n || st.Deleted != 0 || st.Batches != 3 || len(progress) != 3 {
		t.Fatalf("prune %d records in batches of %d: %+v with %d progress reports; want %d tombstoned in 3 batches", n, size, st, len(progress), n)
	}
	for i, p := range progress {
		if p.Batches != i+1 || p.Tombstoned != min(n, (i+1)*size) {
			t.Errorf("progress %d: %+v, want batch %d with %d tombstoned", i, p, i+1, min(n, (i+1)*size))
		}
	}
	if recs, err := l.List(f.ctx, idemtype.ListFilter{State: idemtype.StateTombstone}); err != nil || len(recs) != n {
		t.Fatalf("List(tombstone) = %d records, %v; want %d", len(recs), err, n)
	}

	clk.Advance(time.Hour)
	st, err = l.Prune(f.ctx, &idem.PruneOptions{BatchSize: size, MaxBatches: 2})
	if err != nil || st.Deleted != 2*size || st.Batches != 2 {
		t.Fatalf("prune with MaxBatches 2: %+v, %v; want %d deleted in 2 batches", st, err, 2*size)
	}
	if got := rowCount(t, l); got != n-2*size {
		t.Fatalf("%d rows left, want %d", got, n-2*size)
	}

	// Vacuum: a sweep that changed rows ends with the database's own pass,
	// where it has one (a driver.Vacuumer); a sweep that changed nothing
	// runs none.
	_, vacuums := l.Driver().(driver.Vacuumer)
	st, err = l.Prune(f.ctx, &idem.PruneOptions{BatchSize: size, Vacuum: true})
	if err != nil || st.Deleted != n-2*size || (st.Vacuumed > 0) != vacuums {
		t.Fatalf("prune with Vacuum: %+v, %v; want %d deleted, and vacuumed: %v", st, err, n-2*size, vacuums)
	}
	st, err = l.Prune(f.ctx, &idem.PruneOptions{BatchSize: size, Vacuum: true})
	if err != nil || st.Deleted != 0 || st.Vacuumed != 0 {
		t.Fatalf("prune with Vacuum of nothing: %+v, %v; want nothing deleted and no vacuum", st, err)
	}
}

// testPruneSpares: Prune never touches an in-progress record (live or
// stale), a parked one, a released one within retention, or a completed
// record still inside its retention.
func testPruneSpares(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute, Retention: time.Minute, TombstoneTTL: time.Minute})
	const long = 72 * time.Hour // twice this is still a valid lease

	live := mustClaim(t, f.ctx, l, idem.Op{Key: "live", Lease: 2 * long}, idem.Acquired)
	mustClaim(t, f.ctx, l, idem.Op{Key: "stale"}, idem.Acquired) // lease ends, nobody takes it
	parked := mustClaim(t, f.ctx, l, idem.Op{Key: "parked"}, idem.Acquired)
	if err := l.Park(f.ctx, parked); err != nil {
		t.Fatal(err)
	}
	kept := mustClaim(t, f.ctx, l, idem.Op{Key: "authoritative", Retention: 2 * long}, idem.Acquired)
	if err := l.Complete(f.ctx, kept, idem.Result{Body: []byte("still valid")}); err != nil {
		t.Fatal(err)
	}
	released := mustClaim(t, f.ctx, l, idem.Op{Key: "released", Retention: 2 * long}, idem.Acquired)
	if err := l.Release(f.ctx, released); err != nil {
		t.Fatal(err)
	}
	spared := []string{"live", "stale", "parked", "authoritative", "released"}
	before := map[string]idemtype.Record{}
	for _, k := range spared {
		before[k] = mustGet(t, f.ctx, l, "", k)
	}

	clk.Advance(long)
	st, err := l.Prune(f.ctx, &idem.PruneOptions{BatchSize: 1})
	if err != nil || st.Tombstoned != 0 || st.Deleted != 0 {
		t.Fatalf("prune: %+v, %v; want nothing changed", st, err)
	}
	for _, k := range spared {
		if after := mustGet(t, f.ctx, l, "", k); !sameRecord(before[k], after) {
			t.Errorf("prune changed %s:\nbefore %+v\nafter  %+v", k, before[k], after)
		}
	}
	if err := l.Complete(f.ctx, live, idem.Result{Body: []byte("finished after prune")}); err != nil {
		t.Fatalf("live holder complete after prune: %v", err)
	}
}

// testPruneReleased: a released key's row is deleted once its retention has
// passed since release; the key then starts again at token 1.
func testPruneReleased(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Retention: time.Minute})
	op := idem.Op{Key: "k"}
	c := mustClaim(t, f.ctx, l, op, idem.Acquired)
	clk.Advance(20 * time.Second) // within the default lease
	if err := l.Release(f.ctx, c); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Millisecond)
	if st, err := l.Prune(f.ctx, nil); err != nil || st.Deleted != 0 {
		t.Fatalf("prune within retention of the release: %+v, %v; want nothing deleted", st, err)
	}
	clk.Advance(time.Millisecond)
	if st, err := l.Prune(f.ctx, nil); err != nil || st.Deleted != 1 {
		t.Fatalf("prune after retention of the release: %+v, %v; want 1 deleted", st, err)
	}
	old := c
	c = mustClaim(t, f.ctx, l, op, idem.Acquired)
	if c.Token != 1 {
		t.Fatalf("claim after the released row was deleted: token %d, want 1", c.Token)
	}
	// The old holder had token 1 too; its lease id still fences it out.
	if err := l.Complete(f.ctx, old, idem.Result{Body: []byte("ghost")}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("holder of the deleted incarnation Complete: %v, want ErrLeaseLost", err)
	}
}

// testPruneMixed: one batch over records past both windows (deleted at
// once) and records past retention only (made tombstones, which still
// answer expired): each gets its own outcome, none the other's.
func testPruneMixed(t *testing.T, s *suite) {
	const (
		retention = time.Minute
		ttl       = time.Hour
	)
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Retention: retention, TombstoneTTL: ttl})
	complete := func(key string) {
		c := mustClaim(t, f.ctx, l, idem.Op{Key: key, Fingerprint: "fp"}, idem.Acquired)
		if err := l.Complete(f.ctx, c, idem.Result{Body: []byte("done")}); err != nil {
			t.Fatal(err)
		}
	}
	old, recent := []string{"old-1", "old-2", "old-3"}, []string{"recent-1", "recent-2"}
	for _, k := range old {
		complete(k)
	}
	clk.Advance(ttl)
	for _, k := range recent {
		complete(k)
	}
	clk.Advance(2 * retention) // old-*: past both windows; recent-*: past retention only
	st, err := l.Prune(f.ctx, &idem.PruneOptions{BatchSize: 10, MaxBatches: 1})
	if err != nil || st.Tombstoned != 5 || st.Deleted != 3 || st.Batches != 1 {
		t.Fatalf("prune: %+v, %v; want 5 tombstoned (3 of them deleted at once) in 1 batch", st, err)
	}
	for _, k := range old {
		if _, err := l.Get(f.ctx, "", k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("get %s past both windows after prune: %v, want ErrNotFound", k, err)
		}
	}
	for _, k := range recent {
		expectExpired(t, f, l, idem.Op{Key: k, Fingerprint: "fp"}, idemtype.StateTombstone)
	}
	if c := mustClaim(t, f.ctx, l, idem.Op{Key: "old-1", Fingerprint: "fp"}, idem.Acquired); c.Token != 1 {
		t.Fatalf("claim of a deleted key: token %d, want 1", c.Token)
	}
}
