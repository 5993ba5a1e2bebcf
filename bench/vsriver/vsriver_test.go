package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// tiny are the sizes of the tests' runs: every workload, both sides, in a
// few seconds.
func tiny(db string) []string {
	return []string{"--db", db, "--runs", "1", "--jobs", "200", "--workers", "20", "--producers", "4", "--batch", "50", "--timeout", "2m"}
}

// TestRunSQLite runs every workload on both sides, tiny, on SQLite files,
// and checks the table has every row with a ratio. Each workload fails the
// run unless every job it made is found in the side's own table, completed
// (available for bulk), and every steady job's run was recorded.
func TestRunSQLite(t *testing.T) {
	checkRun(t, append(tiny("sqlite"), "--dir", t.TempDir()), "SQLite")
}

// TestRunPostgres does the same on PostgreSQL, given a server in
// $VSRIVER_PG (see docs/performance.md for starting one). Without one it
// skips, or fails under IDEM_REQUIRE_POSTGRES=1 (CI starts a server).
func TestRunPostgres(t *testing.T) {
	if os.Getenv("VSRIVER_PG") == "" {
		if os.Getenv("IDEM_REQUIRE_POSTGRES") == "1" {
			t.Fatal("VSRIVER_PG is not set, and IDEM_REQUIRE_POSTGRES=1")
		}
		t.Skip("VSRIVER_PG is not set")
	}
	checkRun(t, tiny("postgres"), "PostgreSQL")
}

func checkRun(t *testing.T, args []string, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	t.Logf("\n%s%s", errOut.String(), out.String())
	for _, row := range metricRows {
		line := findLine(out.String(), "| "+row.label+" | "+db+" |")
		if line == "" {
			t.Errorf("no %s row for %s in:\n%s", row.label, db, out.String())
			continue
		}
		if !strings.Contains(line, "×** (") {
			t.Errorf("row without a ratio: %s", line)
		}
	}
}

func findLine(s, prefix string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// lossy is a system whose table holds one job fewer than it was given.
type lossy struct {
	rec *recorder
}

func (l lossy) insertBulk(ctx context.Context, n, batch int) error { return nil }
func (l lossy) insert(ctx context.Context, job noop) error {
	l.rec.ran(job)
	l.rec.complete()
	return nil
}
func (l lossy) start(ctx context.Context) error { return nil }
func (l lossy) count(ctx context.Context, state string) (int, error) {
	return int(l.rec.want) - 1, nil
}
func (l lossy) close() error { return nil }

// TestMeasureChecksTheTable: a side that reports every job done but whose
// table lacks one fails the workload.
func TestMeasureChecksTheTable(t *testing.T) {
	for _, wl := range workloadNames {
		rec := newRecorder(10)
		o := options{Jobs: 10, Batch: 5, Producers: 2}
		if wl == wlDrain {
			for range 10 {
				rec.complete()
			}
		}
		_, err := measure(context.Background(), lossy{rec}, rec, wl, o)
		if err == nil || !strings.Contains(err.Error(), "9 jobs") {
			t.Errorf("%s: err = %v, want one about 9 jobs in the table", wl, err)
		}
	}
}

// TestTable checks the medians, ranges and ratios: idem/River for rates,
// River/idem for latency, each per run.
func TestTable(t *testing.T) {
	r := results{}
	for i, v := range []float64{200, 600, 400} {
		r.add("sqlite", wlDrain, "idem", v)
		r.add("sqlite", wlDrain, "river", []float64{100, 100, 400}[i])
	}
	r.add("sqlite", mLatency, "idem", 10)
	r.add("sqlite", mLatency, "river", 25)
	got := r.table([]string{"sqlite"}, 3)
	for _, want := range []string{
		"| drain, pre-inserted (jobs/s) | SQLite | 400 (200–600) | 100 (100–400) | **2.00×** (1.00–6.00) |",
		"| enqueue→run p99 in steady (ms, lower is better) | SQLite | 10 (10–10) | 25 (25–25) | **2.50×** (2.50–2.50) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "bulk") {
		t.Errorf("table has a row for a workload not run:\n%s", got)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--db", "mysql"},
		{"--db", "postgres", "--pg", ""},
		{"--workloads", "drain,nap"},
		{"--jobs", "0"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
