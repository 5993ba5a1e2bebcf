package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// TestLedgerCounts checks the driver counts behind the gauges and behind
// `idem prune --dry-run` on both databases: the dry run must predict what
// a real prune then does.
func TestLedgerCounts(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, driver, &idem.Options{Lease: 10 * time.Second, Retention: time.Minute, TombstoneTTL: time.Hour})
			l := b.l
			done := func(key string, ret time.Duration) {
				t.Helper()
				c := claim(t, l, idem.Op{Key: key, Retention: ret})
				if err := l.Complete(ctx, c, idem.Result{Status: 200, Body: []byte(key)}); err != nil {
					t.Fatal(err)
				}
			}
			done("old-1", 0)
			done("old-2", 0)
			done("fresh", 24*time.Hour)
			rel := claim(t, l, idem.Op{Key: "released"})
			if err := l.Release(ctx, rel); err != nil {
				t.Fatal(err)
			}
			claim(t, l, idem.Op{Key: "stuck-1"})
			claim(t, l, idem.Op{Key: "stuck-2", Lease: time.Hour})
			park := claim(t, l, idem.Op{Key: "parked"})
			if err := l.Park(ctx, park); err != nil {
				t.Fatal(err)
			}

			b.clock.add(2 * time.Minute) // old-* past retention, released past its own; stuck-1 stale

			n, err := l.Count(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := (idemtype.OpenCounts{InProgress: 2, Stale: 1, Parked: 1}); n != want {
				t.Errorf("Count = %+v, want %+v", n, want)
			}
			if n, err := l.Count(ctx, 1); err != nil || n.InProgress != 1 {
				t.Errorf("Count with limit 1 = %+v, %v: want InProgress capped at 1", n, err)
			}

			dry, err := l.PruneCount(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := (idemtype.PruneCounts{Tombstoned: 2, Deleted: 1}); dry != want {
				t.Errorf("PruneCount = %+v, want %+v", dry, want)
			}
			if _, err := l.Get(ctx, "", "old-1"); err != nil {
				t.Fatalf("the dry run changed something: %v", err)
			}
			real, err := l.Prune(ctx, &idem.PruneOptions{BatchSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			if real.Tombstoned != dry.Tombstoned || real.Deleted != dry.Deleted {
				t.Errorf("Prune = %+v, but the dry run said %+v", real, dry)
			}

			// Past the tombstone window, a completed record is tombstoned and
			// deleted in the same sweep: the count says so too.
			b.clock.add(2 * time.Hour)
			dry, err = l.PruneCount(ctx)
			if err != nil {
				t.Fatal(err)
			}
			real, err = l.Prune(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if dry.Tombstoned != real.Tombstoned || dry.Deleted != real.Deleted || real.Deleted != 2 {
				t.Errorf("after the window: dry run %+v, prune %+v (want 2 tombstones deleted)", dry, real)
			}
		})
	}
}
