package drivertest

import (
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// testActivity covers the optional Activity interface with two ledgers on
// one database (two gateways): each reports its counters under its own
// source and both are read back; replays reported for a key add up on its
// record (a key without a record is skipped); counts by state and the
// most recently updated records see every record, whoever wrote it.
func testActivity(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	a := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
	b := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
	da, ok := a.Driver().(driver.Activity)
	if !ok {
		t.Skipf("%s does not implement driver.Activity", a.Driver().Name())
	}
	db := b.Driver().(driver.Activity)
	step := func() { clk.Advance(time.Second) }

	hostile := "<script>x</script>\"'&"
	done := mustClaim(t, f.ctx, a, idem.Op{Scope: "s", Key: "done"}, idem.Acquired)
	if err := a.Complete(f.ctx, done, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	step()
	failed := mustClaim(t, f.ctx, b, idem.Op{Scope: "s", Key: hostile}, idem.Acquired)
	if err := b.Fail(f.ctx, failed, idem.Result{Status: 500}); err != nil {
		t.Fatal(err)
	}
	step()
	mustClaim(t, f.ctx, a, idem.Op{Scope: "s", Key: "stale", Lease: time.Second}, idem.Acquired)
	step()
	rel := mustClaim(t, f.ctx, b, idem.Op{Scope: "s", Key: "released"}, idem.Acquired)
	if err := b.Release(f.ctx, rel); err != nil {
		t.Fatal(err)
	}
	step()
	parked := mustClaim(t, f.ctx, a, idem.Op{Scope: "s", Key: "parked"}, idem.Acquired)
	if err := a.Park(f.ctx, parked); err != nil {
		t.Fatal(err)
	}
	step()
	mustClaim(t, f.ctx, b, idem.Op{Scope: "s", Key: "live"}, idem.Acquired)

	counts, err := da.CountStates(f.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := driver.StateCounts{Completed: 2, InProgress: 2, Stale: 1, Parked: 1, Released: 1, Total: 6}
	if counts != want {
		t.Fatalf("CountStates = %+v, want %+v", counts, want)
	}
	if counts, err = da.CountStates(f.ctx, 1); err != nil || counts.Total != 1 || counts.InProgress != 1 {
		t.Fatalf("CountStates(limit 1) = %+v, %v; want each count stopped at 1", counts, err)
	}

	at := clk.Now()
	busy, err := da.ReportActivity(f.ctx, driver.ActivityReport{Source: "gw-a", Counters: map[string]int64{"replays": 3, "mismatches": 1},
		Replays: []driver.KeyReplays{{Scope: "s", Key: "done", N: 2, Last: at}, {Scope: "s", Key: "gone", N: 5, Last: at}}})
	if err != nil || len(busy) != 0 {
		t.Fatalf("ReportActivity(a) = %v, %v", busy, err)
	}
	step()
	if _, err := db.ReportActivity(f.ctx, driver.ActivityReport{Source: "gw-b", Counters: map[string]int64{"replays": 4},
		Replays: []driver.KeyReplays{{Scope: "s", Key: "done", N: 1, Last: at.Add(-time.Hour)}, {Scope: "s", Key: hostile, N: 1, Last: clk.Now()}}}); err != nil {
		t.Fatal(err)
	}
	// Counters are cumulative: a second report replaces the first.
	if _, err := da.ReportActivity(f.ctx, driver.ActivityReport{Source: "gw-a", Counters: map[string]int64{"replays": 7}}); err != nil {
		t.Fatal(err)
	}
	srcs, err := db.ActivitySources(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range srcs {
		got[c.Source+"/"+c.Name] = c.Value
		if c.UpdatedAt.IsZero() {
			t.Errorf("source %s counter %s has no time", c.Source, c.Name)
		}
	}
	if len(got) != 3 || got["gw-a/replays"] != 7 || got["gw-a/mismatches"] != 1 || got["gw-b/replays"] != 4 {
		t.Fatalf("ActivitySources = %v", got)
	}

	recent, err := db.RecentRecords(f.ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range recent {
		keys = append(keys, r.Key)
	}
	if len(keys) != 3 || keys[0] != "live" || keys[1] != "parked" || keys[2] != "released" {
		t.Fatalf("RecentRecords(3) keys = %q, want live, parked, released", keys)
	}
	all, err := da.RecentRecords(f.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]driver.RecentRecord{}
	for _, r := range all {
		byKey[r.Key] = r
	}
	if len(all) != 6 {
		t.Fatalf("RecentRecords(100) = %d records, want 6", len(all))
	}
	if d := byKey["done"]; d.Replays != 3 || !d.LastReplayedAt.Equal(at) || d.State != idemtype.StateSucceeded || d.Status != 201 || d.Attempt != 1 {
		t.Fatalf("done = %+v, want 3 replays, last at %v, succeeded 201", d, at)
	}
	if h := byKey[hostile]; h.Replays != 1 || h.State != idemtype.StateFailed || h.Scope != "s" {
		t.Fatalf("hostile key = %+v, want 1 replay, failed", h)
	}
	if l := byKey["live"]; l.Replays != 0 || !l.LastReplayedAt.IsZero() || l.Now.IsZero() || !l.LeaseUntil.After(l.Now) {
		t.Fatalf("live = %+v, want no replays, a live lease", l)
	}
}
