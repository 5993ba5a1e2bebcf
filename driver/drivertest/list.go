package drivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// testList: the operator's view filters by state, scope and staleness,
// newest update first, up to Limit.
func testList(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
	step := func() { clk.Advance(time.Second) }

	done := mustClaim(t, f.ctx, l, idem.Op{Scope: "a", Key: "done"}, idem.Acquired)
	step()
	if err := l.Complete(f.ctx, done, idem.Result{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	step()
	mustClaim(t, f.ctx, l, idem.Op{Scope: "a", Key: "stale", Lease: time.Second}, idem.Acquired)
	step()
	mustClaim(t, f.ctx, l, idem.Op{Scope: "b", Key: "live"}, idem.Acquired)
	step()
	parked := mustClaim(t, f.ctx, l, idem.Op{Scope: "b", Key: "parked"}, idem.Acquired)
	step()
	if err := l.Park(f.ctx, parked); err != nil {
		t.Fatal(err)
	}
	step()

	keys := func(f idemtype.ListFilter) []string {
		t.Helper()
		recs, err := l.List(t.Context(), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Scope+"/"+r.Key)
		}
		return out
	}
	for _, c := range []struct {
		f    idemtype.ListFilter
		want []string
	}{
		{idemtype.ListFilter{}, []string{"b/parked", "b/live", "a/stale", "a/done"}},
		{idemtype.ListFilter{Limit: 2}, []string{"b/parked", "b/live"}},
		{idemtype.ListFilter{Scope: "a"}, []string{"a/stale", "a/done"}},
		{idemtype.ListFilter{State: idemtype.StateInProgress}, []string{"b/live", "a/stale"}},
		{idemtype.ListFilter{State: idemtype.StateParked}, []string{"b/parked"}},
		{idemtype.ListFilter{Stale: true}, []string{"a/stale"}},
		{idemtype.ListFilter{Stale: true, Scope: "b"}, nil},
	} {
		if got := keys(c.f); !slices.Equal(got, c.want) {
			t.Errorf("List(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
}
