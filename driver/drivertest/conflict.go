package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// sameRecord compares two reads of one record, ignoring the read time.
func sameRecord(a, b idemtype.Record) bool {
	a, b = normalize(a), normalize(b)
	a.Now, b.Now = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// normalize makes times comparable with == (same location) and empty
// byte slices nil.
func normalize(r idemtype.Record) idemtype.Record {
	for _, p := range []*[]byte{&r.Body, &r.Meta} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	r.LeaseUntil, r.CreatedAt, r.UpdatedAt = r.LeaseUntil.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	r.CompletedAt, r.ExpiresAt, r.TombstoneUntil, r.Now = r.CompletedAt.UTC(), r.ExpiresAt.UTC(), r.TombstoneUntil.UTC(), r.Now.UTC()
	return r
}

// testMismatch: the same key with a different fingerprint is refused with
// Mismatch and the record is left exactly as it was, in flight and done.
func testMismatch(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now})
	opA := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp-a"}
	opB := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp-b"}

	c := mustClaim(t, f.ctx, l, opA, idem.Acquired)
	before := mustGet(t, f.ctx, l, "s", "k")
	m := mustClaim(t, f.ctx, l, opB, idem.Mismatch)
	if m.Record.Fingerprint != "fp-a" || m.Record.Attempt != 1 {
		t.Errorf("mismatch carries fingerprint %q attempt %d, want the stored fp-a, 1", m.Record.Fingerprint, m.Record.Attempt)
	}
	if after := mustGet(t, f.ctx, l, "s", "k"); !sameRecord(before, after) {
		t.Fatalf("mismatch changed the in-flight record:\nbefore %+v\nafter  %+v", before, after)
	}

	if err := l.Complete(f.ctx, c, idem.Result{Status: 201, Body: []byte("A")}); err != nil {
		t.Fatal(err)
	}
	before = mustGet(t, f.ctx, l, "s", "k")
	clk.Advance(idem.DefaultLease * 3)
	mustClaim(t, f.ctx, l, opB, idem.Mismatch)
	ran := false
	_, err := l.Do(f.ctx, opB, func(context.Context, *sql.Tx) ([]byte, error) { ran = true; return nil, nil })
	var ce *idem.ConflictError
	if !errors.Is(err, idem.ErrMismatch) || !errors.As(err, &ce) || ce.Record.Fingerprint != "fp-a" || ran {
		t.Fatalf("Do with another fingerprint: %v (ran %v), want a *ConflictError matching ErrMismatch carrying the record", err, ran)
	}
	if after := mustGet(t, f.ctx, l, "s", "k"); !sameRecord(before, after) {
		t.Fatalf("mismatch changed the completed record:\nbefore %+v\nafter  %+v", before, after)
	}
	if r := mustClaim(t, f.ctx, l, opA, idem.Replay); string(r.Result.Body) != "A" {
		t.Fatalf("replay %q, want A", r.Result.Body)
	}
}

// testScopeIsolation: one key in two scopes is two operations. Neither
// sees the other's claim or result, and scope and key never run together
// ("a"+"b:c" is not "a:b"+"c").
func testScopeIsolation(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	ops := []idem.Op{
		{Scope: "alice", Key: "pay-1", Fingerprint: "fp"},
		{Scope: "bob", Key: "pay-1", Fingerprint: "other-fp"},
		{Scope: "", Key: "pay-1", Fingerprint: "fp"},
		{Scope: "a", Key: "b:c", Fingerprint: "fp"},
		{Scope: "a:b", Key: "c", Fingerprint: "fp"},
		{Scope: "a:b:c", Key: "pay-1", Fingerprint: "fp"},
	}
	claims := make([]*idem.Claim, len(ops))
	for i, op := range ops {
		claims[i] = mustClaim(t, f.ctx, l, op, idem.Acquired)
		if claims[i].Token != 1 {
			t.Errorf("scope %q key %q: token %d, want 1", op.Scope, op.Key, claims[i].Token)
		}
	}
	// Complete only the first: the others stay in flight in their own scope.
	if err := l.Complete(f.ctx, claims[0], idem.Result{Body: []byte("alice's receipt")}); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops[1:] {
		mustClaim(t, f.ctx, l, op, idem.InFlight)
	}
	for i, c := range claims[1:] {
		if err := l.Complete(f.ctx, c, idem.Result{Body: []byte("receipt " + ops[i+1].Scope + "|" + ops[i+1].Key)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, op := range ops {
		want := "receipt " + op.Scope + "|" + op.Key
		if i == 0 {
			want = "alice's receipt"
		}
		r := mustClaim(t, f.ctx, l, op, idem.Replay)
		if string(r.Result.Body) != want || r.Record.Scope != op.Scope || r.Record.Key != op.Key {
			t.Errorf("scope %q key %q replayed %q from %q/%q, want %q", op.Scope, op.Key, r.Result.Body, r.Record.Scope, r.Record.Key, want)
		}
	}
	for _, scope := range []string{"alice", "bob"} {
		recs, err := l.List(f.ctx, idemtype.ListFilter{Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Scope != scope {
			t.Errorf("List(scope %q) = %d records, want exactly its own one", scope, len(recs))
		}
	}
}
