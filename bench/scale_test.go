package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
)

// checkScale: the scale group's rows come back, each side measured, with
// the sizes and counts the rows promise. Nothing here judges a speed.
func checkScale(t *testing.T, res []Result, keys int, concurrency []int) {
	t.Helper()
	want := 3*len(concurrency) + 1 // claim+complete, replay, while pruning at each; the prune
	if len(res) != want {
		t.Fatalf("%d rows, want %d: %+v", len(res), want, res)
	}
	for _, r := range res {
		if r.Group != GroupScale || r.Keys != keys {
			t.Errorf("%s: group %q keys %d", r.Name, r.Group, r.Keys)
		}
		if r.OpsPerSec <= 0 || r.BaselineOpsPerS <= 0 || r.Ratio <= 0 {
			t.Errorf("%s at %d: a side measured nothing: %+v", r.Name, r.Concurrency, r)
		}
		switch {
		case strings.HasPrefix(r.Name, "scale prune"):
			if r.DiskBytesBefore <= 0 || r.DiskBytesAfter <= 0 || !strings.Contains(r.Note, "tombstoned and deleted") {
				t.Errorf("%s: sizes %d → %d, note %q", r.Name, r.DiskBytesBefore, r.DiskBytesAfter, r.Note)
			}
		default:
			if r.P50 == nil || r.P99 == nil || *r.P50 <= 0 || *r.P99 < *r.P50 || *r.BaselineP99 < *r.BaselineP50 {
				t.Errorf("%s at %d: latencies %v %v", r.Name, r.Concurrency, r.P50, r.P99)
			}
		}
		if strings.HasPrefix(r.Name, "scale claim+complete at") || strings.HasPrefix(r.Name, "scale replay") {
			// A record holds a UUID, a scope and a 1 KiB response: more
			// than 1 KiB and, with indexes, well under 8.
			if r.FillSeconds <= 0 || r.BytesPerKey < 1024 || r.BytesPerKey > 8192 {
				t.Errorf("%s: fill %.2fs, %.0f bytes per key (%s)", r.Name, r.FillSeconds, r.BytesPerKey, r.Note)
			}
		}
	}
}

func TestScaleSQLite(t *testing.T) {
	t.Parallel()
	c := []int{1, 4}
	res, err := Run(t.Context(), &Options{Groups: []string{GroupScale}, Keys: 2000, Duration: 500 * time.Millisecond, Concurrency: c})
	if err != nil {
		t.Fatal(err)
	}
	checkScale(t, res, 2000, c)
}

// TestScalePostgres runs the scale rows in a throwaway cluster, as
// `idem bench --rows scale --db postgres` does.
func TestScalePostgres(t *testing.T) {
	t.Parallel()
	pgtest.RequireBinaries(t)
	c := []int{1, 4}
	res, err := Run(t.Context(), &Options{DB: "postgres", Groups: []string{GroupScale}, Keys: 2000, Duration: 500 * time.Millisecond, Concurrency: c})
	if err != nil {
		t.Fatal(err)
	}
	checkScale(t, res, 2000, c)
}

// TestScaleRefusesSharedDatabase: the scale rows fill millions of rows,
// never in a database given by URL.
func TestScaleRefusesSharedDatabase(t *testing.T) {
	t.Parallel()
	_, err := Run(t.Context(), &Options{DB: "sqlite:" + t.TempDir() + "/x.db", Groups: []string{GroupScale}, Keys: 2000})
	if err == nil || !strings.Contains(err.Error(), "one of their own") {
		t.Fatalf("err = %v", err)
	}
}
