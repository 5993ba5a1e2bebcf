package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
)

// On a ledger of 50,000 records the recent list is read through the
// index on updated_at (no scan, no sort), and a report of 10,000 replayed
// keys is one transaction. The times are logged, not asserted.
func TestActivityOnALargeLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := testOpen(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const rows = 20_000
	keys, err := d.FillCompleted(ctx, driver.FillParams{N: rows, Scope: "s", Scopes: 10, Retention: time.Hour, TombstoneTTL: time.Hour, Sample: 5_000})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := d.r.Query(ctx, `EXPLAIN QUERY PLAN `+recentQuery, 50)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for plan.Next() {
		var id, parent, unused int
		var detail string
		if err := plan.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	plan.Close()
	if p := strings.Join(steps, "; "); !strings.Contains(p, "USING INDEX idem_keys_updated") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("recent list plan: %s; want the updated_at index, no sort", p)
	}

	start := time.Now()
	recent, err := d.RecentRecords(ctx, 50)
	tookRecent := time.Since(start)
	if err != nil || len(recent) != 50 {
		t.Fatalf("RecentRecords: %d, %v", len(recent), err)
	}
	start = time.Now()
	c, err := d.CountStates(ctx, 10_000)
	tookCount := time.Since(start)
	if err != nil || c.Completed != 10_000 || c.Total != 10_000 {
		t.Fatalf("CountStates(10000) = %+v, %v", c, err)
	}
	var took []string
	for _, n := range []int{1000, len(keys)} {
		rep := driver.ActivityReport{Source: "big", Counters: map[string]int64{"replays": int64(n)}}
		for _, k := range keys[:n] {
			rep.Replays = append(rep.Replays, driver.KeyReplays{Scope: k.Scope, Key: k.Key, N: 1, Last: time.Now()})
		}
		start = time.Now()
		if _, err := d.ReportActivity(ctx, rep); err != nil {
			t.Fatal(err)
		}
		took = append(took, fmt.Sprintf("a report of %d keys in %v", n, time.Since(start)))
	}
	var replays int64
	if err := d.r.QueryRow(ctx, `SELECT sum(replays) FROM idem_keys`).Scan(&replays); err != nil || replays != int64(1000+len(keys)) {
		t.Fatalf("replays stored: %d, %v; want %d", replays, err, 1000+len(keys))
	}
	t.Logf("%d records: recent 50 in %v, counts by state (cap 10,000) in %v, %s", rows, tookRecent, tookCount, strings.Join(took, ", "))
}
