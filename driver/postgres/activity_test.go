package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
)

// On a ledger of 200,000 records the recent list is read backwards
// through the index on updated_at (no scan, no sort), and reports of
// 1,000 and 10,000 replayed keys are one transaction each. The times are
// logged, not asserted.
func TestActivityOnALargeLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	const rows = 200_000
	keys, err := d.FillCompleted(ctx, driver.FillParams{N: rows, Scope: "s", Scopes: 10, Retention: time.Hour, TombstoneTTL: time.Hour, Sample: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.pool.Exec(ctx, `ANALYZE idem_keys`); err != nil {
		t.Fatal(err)
	}
	var plan []string
	r, err := d.pool.Query(ctx, `EXPLAIN `+recentQuery, nil, 50)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var line string
		if err := r.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	r.Close()
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "Index Scan Backward using idem_keys_updated") || strings.Contains(p, "Seq Scan on idem_keys") || strings.Contains(p, "Sort") {
		t.Errorf("recent list plan:\n%s\nwant the updated_at index, no scan, no sort", p)
	}

	start := time.Now()
	recent, err := d.RecentRecords(ctx, 50)
	tookRecent := time.Since(start)
	if err != nil || len(recent) != 50 {
		t.Fatalf("RecentRecords: %d, %v", len(recent), err)
	}
	start = time.Now()
	c, err := d.CountStates(ctx, 100_000)
	tookCount := time.Since(start)
	if err != nil || c.Completed != 100_000 || c.Total != 100_000 {
		t.Fatalf("CountStates(100000) = %+v, %v", c, err)
	}
	var took []string
	for _, n := range []int{1000, len(keys)} {
		rep := driver.ActivityReport{Source: "big", Counters: map[string]int64{"replays": int64(n)}}
		for _, k := range keys[:n] {
			rep.Replays = append(rep.Replays, driver.KeyReplays{Scope: k.Scope, Key: k.Key, N: 1, Last: time.Now()})
		}
		start = time.Now()
		busy, err := d.ReportActivity(ctx, rep)
		if err != nil || len(busy) != 0 {
			t.Fatalf("report: %d busy, %v", len(busy), err)
		}
		took = append(took, fmt.Sprintf("a report of %d keys in %v", n, time.Since(start)))
	}
	var replays int64
	if err := d.pool.QueryRow(ctx, `SELECT sum(replays) FROM idem_keys`).Scan(&replays); err != nil || replays != int64(1000+len(keys)) {
		t.Fatalf("replays stored: %d, %v; want %d", replays, err, 1000+len(keys))
	}
	t.Logf("%d records: recent 50 in %v, counts by state (cap 100,000) in %v, %s", rows, tookRecent, tookCount, strings.Join(took, ", "))
}

// A record a claim holds locked is not waited for: the report skips it
// and returns it as busy; the others are written.
func TestReportActivitySkipsLockedRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	keys, err := d.FillCompleted(ctx, driver.FillParams{N: 2, Scope: "s", Scopes: 1, Retention: time.Hour, TombstoneTTL: time.Hour, Sample: 2})
	if err != nil || len(keys) != 2 {
		t.Fatalf("fill: %v %v", keys, err)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE idem_keys SET status = 7 WHERE scope = $1 AND key = $2`, keys[0].Scope, keys[0].Key); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a report that waited would end here
	defer cancel()
	busy, err := d.ReportActivity(rctx, driver.ActivityReport{Source: "x", Replays: []driver.KeyReplays{
		{Scope: keys[0].Scope, Key: keys[0].Key, N: 2, Last: time.Now()},
		{Scope: keys[1].Scope, Key: keys[1].Key, N: 3, Last: time.Now()},
		{Scope: "s", Key: "no-such-key", N: 1, Last: time.Now()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(busy) != 1 || busy[0].Key != keys[0].Key || busy[0].N != 2 {
		t.Fatalf("busy = %+v, want the locked key only", busy)
	}
	var n0, n1 int64
	tx.Rollback(ctx)
	if err := d.pool.QueryRow(ctx, `SELECT (SELECT replays FROM idem_keys WHERE key = $1), (SELECT replays FROM idem_keys WHERE key = $2)`, keys[0].Key, keys[1].Key).Scan(&n0, &n1); err != nil {
		t.Fatal(err)
	}
	if n0 != 0 || n1 != 3 {
		t.Fatalf("replays: locked key %d (want 0), free key %d (want 3)", n0, n1)
	}
}
