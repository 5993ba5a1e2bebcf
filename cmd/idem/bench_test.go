package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchRuns runs the smallest bench there is and checks the table and
// the JSON rows; it says nothing about speed.
func TestBenchRuns(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "bench.json")
	// A window a loaded machine under -race still finishes operations in
	// (each side runs in four slices).
	r := opRun(t, "", "bench", "--duration", "500ms", "--concurrency", "1,2", "--rows", "ledger,groupcommit", "--out", file).must(t, 0)
	for _, want := range []string{"ledger claim+complete", "ledger group commit", "ops/s", "ratio", "synchronous=FULL"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stderr, " 1 callers") || !strings.Contains(r.stderr, "ledger claim+complete, 1 caller:") {
		t.Errorf("progress should say \"1 caller\":\n%s", r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d JSON rows, want 4:\n%s", len(lines), b)
	}
	for _, line := range lines {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		for _, k := range []string{"name", "ops_per_s", "p50_ms", "p99_ms", "baseline_ops_per_s", "ratio"} {
			if _, ok := row[k]; !ok {
				t.Errorf("row lacks %q: %s", k, line)
			}
		}
		if row["ops_per_s"].(float64) <= 0 || row["baseline_ops_per_s"].(float64) <= 0 {
			t.Errorf("a side measured nothing: %s", line)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "--concurrency", "0"},
		{"bench", "--concurrency", "a,b"},
		{"bench", "--rows", "ledger,nope"},
		{"bench", "--duration", "1ms"},
		{"bench", "--keys", "5"},
		{"bench", "--runs", "0"},
		{"bench", "--runs", "101"},
		{"bench", "extra"},
	} {
		r := opRun(t, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "(see idem bench --help)") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a pointer to the help", args, r.code, r.stderr)
		}
	}
	r := opRun(t, "", "bench", "--db", "mysql://x", "--duration", "100ms")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown database") {
		t.Errorf("unknown database: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestBenchRunsFlag: --runs 2 measures each row twice and prints the
// median run with its range; the JSON says how many runs.
func TestBenchRunsFlag(t *testing.T) {
	t.Parallel()
	r := opRun(t, "", "bench", "--duration", "500ms", "--concurrency", "1", "--rows", "ledger", "--runs", "2", "--json").must(t, 0)
	if !strings.Contains(r.stderr, "(run 1 of 2)") || !strings.Contains(r.stderr, "(run 2 of 2)") {
		t.Errorf("progress does not say the runs:\n%s", r.stderr)
	}
	var row struct {
		Runs     int      `json:"runs"`
		Ratio    float64  `json:"ratio"`
		RatioMin *float64 `json:"ratio_min"`
		RatioMax *float64 `json:"ratio_max"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &row); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if row.Runs != 2 || row.RatioMin == nil || row.RatioMax == nil || *row.RatioMin > row.Ratio || row.Ratio > *row.RatioMax {
		t.Errorf("runs %d, ratio %v, range %v–%v: %s", row.Runs, row.Ratio, row.RatioMin, row.RatioMax, r.stdout)
	}
}
