package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// checkRows: every row measured both sides, and the JSON carries the
// fields `idem bench --json` promises. Nothing here judges a speed.
func checkRows(t *testing.T, results []Result, wantRows int) {
	t.Helper()
	if len(results) != wantRows {
		t.Fatalf("%d rows, want %d", len(results), wantRows)
	}
	for _, r := range results {
		if r.OpsPerSec <= 0 || r.BaselineOpsPerS <= 0 || r.Ratio <= 0 {
			t.Errorf("%s at %d: a side measured nothing: %+v", r.Name, r.Concurrency, r)
		}
		if r.Name == "jobs claim+complete" {
			continue // latency not observable from outside the jobs client
		}
		if r.P50 == nil || r.P99 == nil || *r.P50 <= 0 || *r.P99 < *r.P50 {
			t.Errorf("%s at %d: latencies %v %v", r.Name, r.Concurrency, r.P50, r.P99)
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, results); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"name", "ops_per_s", "p50_ms", "p99_ms", "baseline_ops_per_s", "ratio"} {
			if _, ok := m[k]; !ok {
				t.Errorf("JSON row lacks %q: %s", k, line)
			}
		}
	}
	buf.Reset()
	if err := WriteTable(&buf, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "ratio") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestRunSQLite(t *testing.T) {
	t.Parallel()
	// A window long enough that even a loaded machine under -race (an
	// fsync can take 50 ms then) finishes operations inside every slice.
	res, err := Run(t.Context(), &Options{Duration: time.Second, Concurrency: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	want := 7 // ledger, group commit, enqueue, jobs bulk insert, jobs claim+complete, gateway vs bare and vs safe proxy
	if dburl.SQLiteLibraries()["mattn"] {
		want++ // modernc vs mattn
	}
	checkRows(t, res, want)
}

// TestRunSharedPostgres runs on a database given by URL, as against a
// user's server: both sides share it, and the run deletes what it wrote.
func TestRunSharedPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	res, err := Run(t.Context(), &Options{DB: url, Duration: time.Second, Concurrency: []int{2},
		Groups: []string{GroupLedger, GroupGroupCommit, GroupJobs}})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 5)
	drv, err := dburl.OpenDriver(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	for _, table := range []string{"idem_keys", "idem_jobs"} {
		var n int
		if err := drv.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s holds %d rows after the run (%v); the run must delete what it wrote", table, n, err)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Groups: []string{"nope"}},
		{Concurrency: []int{0}},
		{Duration: time.Millisecond},
		{DB: "mysql://x"},
	} {
		if _, err := Run(context.Background(), &o); err == nil {
			t.Errorf("Run(%+v) succeeded", o)
		}
	}
}
