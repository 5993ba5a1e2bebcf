package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/dburl"
)

// run makes up one run of a row: ops/s of both sides, the ratio as
// newResult computes it.
func run(ops, base float64) Result {
	r := Result{Name: "row", Driver: "sqlite", Concurrency: 1, OpsPerSec: ops, BaselineOpsPerS: base}
	if base > 0 {
		r.Ratio = ops / base
	}
	return r
}

func checkRange(t *testing.T, got Result, runs int, ratio, lo, hi float64) {
	t.Helper()
	if got.Runs != runs || got.Ratio != ratio || got.RatioMin == nil || got.RatioMax == nil || *got.RatioMin != lo || *got.RatioMax != hi {
		t.Fatalf("got runs %d ratio %v range %v–%v, want %d, %v, %v–%v", got.Runs, got.Ratio, got.RatioMin, got.RatioMax, runs, ratio, lo, hi)
	}
	if !(*got.RatioMin <= got.Ratio && got.Ratio <= *got.RatioMax) {
		t.Fatalf("ratio %v outside its range %v–%v", got.Ratio, *got.RatioMin, *got.RatioMax)
	}
}

// The row is the median run, whole: its ratio, and its own ops/s (not
// another run's, nor a mean).
func TestMedianPicksTheMiddleRun(t *testing.T) {
	t.Parallel()
	got := median([]Result{run(110, 100), run(90, 100), run(200, 200)})
	checkRange(t, got, 3, 1, 0.9, 1.1)
	if got.OpsPerSec != 200 || got.BaselineOpsPerS != 200 {
		t.Errorf("the row carries ops/s %v vs %v, want the median run's 200 vs 200", got.OpsPerSec, got.BaselineOpsPerS)
	}
	if got.Note != "" {
		t.Errorf("note %q: every run had a ratio", got.Note)
	}
}

// With an even number of runs there is no middle run: the lower of the
// two middle ones is the row (a run, never an average of two).
func TestMedianEvenRuns(t *testing.T) {
	t.Parallel()
	got := median([]Result{run(400, 100), run(100, 100), run(300, 100), run(200, 100)})
	checkRange(t, got, 4, 2, 1, 4)
	got = median([]Result{run(120, 100), run(80, 100)})
	checkRange(t, got, 2, 0.8, 0.8, 1.2)
}

// A run whose baseline did nothing has no ratio: it is left out of the
// median and the range, said in the note, and nothing crashes. A run
// whose idem side did nothing has the ratio 0, which counts.
func TestMedianRunsWithoutRatio(t *testing.T) {
	t.Parallel()
	nan := run(100, 100)
	nan.Ratio = math.NaN()
	got := median([]Result{run(50, 0), run(120, 100), nan, run(0, 100), run(90, 100)})
	checkRange(t, got, 5, 0.9, 0, 1.2)
	if !strings.Contains(got.Note, "3 of 5 runs") {
		t.Errorf("note %q does not say how many runs were ranked", got.Note)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, []Result{got}); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["runs"] != 5.0 || m["ratio_min"] != 0.0 || m["ratio_max"] != 1.2 {
		t.Errorf("JSON runs %v ratio_min %v ratio_max %v, want 5, 0 (present though zero), 1.2: %s", m["runs"], m["ratio_min"], m["ratio_max"], buf.String())
	}

	// No run with a ratio: the first run, ratio 0, no range; still JSON.
	got = median([]Result{run(50, 0), nan})
	if got.Runs != 2 || got.Ratio != 0 || got.RatioMin != nil || got.RatioMax != nil || got.OpsPerSec != 50 || !strings.Contains(got.Note, "no run of 2") {
		t.Errorf("no run with a ratio: %+v", got)
	}
	buf.Reset()
	if err := WriteJSON(&buf, []Result{got}); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := WriteTable(&buf, []Result{got}); err != nil || !strings.Contains(buf.String(), "0.00× (no range)") {
		t.Errorf("table (%v):\n%s", err, buf.String())
	}
}

// A single run is today's row: no runs, ratio_min, ratio_max in the JSON,
// the plain ratio in the table.
func TestMedianSingleRunUnchanged(t *testing.T) {
	t.Parallel()
	one := run(110, 100)
	got := median([]Result{one})
	var a, b bytes.Buffer
	if err := WriteJSON(&a, []Result{one}); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, []Result{got}); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("single run changed:\n%s\n%s", a.String(), b.String())
	}
	for _, k := range []string{"runs", "ratio_min", "ratio_max"} {
		if strings.Contains(a.String(), `"`+k+`"`) {
			t.Errorf("single-run JSON has %q: %s", k, a.String())
		}
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, []Result{got}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tab.String(), "×") || strings.Contains(tab.String(), "median") || !strings.Contains(tab.String(), " 1.10") {
		t.Errorf("single-run table:\n%s", tab.String())
	}
}

func TestTableShowsRange(t *testing.T) {
	t.Parallel()
	got := median([]Result{run(110, 100), run(95, 100), run(102, 100)})
	var buf bytes.Buffer
	if err := WriteTable(&buf, []Result{got}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "1.02× (0.95–1.10)") || !strings.Contains(buf.String(), "measured 3 times") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// medians picks per row: a measurement that makes two rows (the gateway's
// vs bare and vs safe proxy) may have a different median run for each.
func TestMediansPerRow(t *testing.T) {
	t.Parallel()
	got := medians([][]Result{
		{run(100, 100), run(300, 100)},
		{run(200, 100), run(100, 100)},
		{run(300, 100), run(200, 100)},
	})
	if len(got) != 2 {
		t.Fatalf("%d rows", len(got))
	}
	checkRange(t, got[0], 3, 2, 1, 3)
	checkRange(t, got[1], 3, 2, 1, 3)
}

// The prune budget shared out among runs adds up to the budget: the runs
// never prune more than one run does.
func TestShareAddsUp(t *testing.T) {
	t.Parallel()
	for _, total := range []int{0, 1, 2, 3, 7, 1000} {
		for runs := 1; runs <= 5; runs++ {
			sum, lo, hi := 0, total, 0
			for k := range runs {
				s := share(total, runs, k)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			if sum != total || hi-lo > 1 {
				t.Errorf("share(%d, %d): sum %d, parts %d…%d", total, runs, sum, lo, hi)
			}
		}
	}
}

// checkRuns: every row was measured runs times and carries a ratio inside
// its range.
func checkRuns(t *testing.T, res []Result, runs int) {
	t.Helper()
	for _, r := range res {
		if r.Runs != runs || r.RatioMin == nil || r.RatioMax == nil {
			t.Errorf("%s at %d: runs %d, range %v–%v; want %d runs and a range", r.Name, r.Concurrency, r.Runs, r.RatioMin, r.RatioMax, runs)
			continue
		}
		if !(*r.RatioMin <= r.Ratio && r.Ratio <= *r.RatioMax) {
			t.Errorf("%s at %d: ratio %v outside %v–%v", r.Name, r.Concurrency, r.Ratio, *r.RatioMin, *r.RatioMax)
		}
	}
}

func TestRunsSQLite(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	res, err := Run(t.Context(), &Options{Groups: []string{GroupLedger, GroupGroupCommit}, Duration: 500 * time.Millisecond,
		Concurrency: []int{2}, Runs: 3, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2)
	checkRuns(t, res, 3)
	// Both rows come from the same three measurements.
	for k := 1; k <= 3; k++ {
		if n := strings.Count(progress.String(), "ledger claim+complete, 2 callers: idem, hand-written SQL, group commit off (run "+string(rune('0'+k))+" of 3)"); n != 1 {
			t.Errorf("run %d measured %d times:\n%s", k, n, progress.String())
		}
	}
}

// TestRunsEveryDefaultGroup: every default group can be measured more
// than once on the same databases; a run that started its keys again
// would meet the previous run's records (the SQLite libraries' row did).
func TestRunsEveryDefaultGroup(t *testing.T) {
	t.Parallel()
	res, err := Run(t.Context(), &Options{Duration: 200 * time.Millisecond, Concurrency: []int{1}, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]bool{}
	for _, r := range res {
		groups[r.Group] = true
	}
	for _, g := range DefaultGroups {
		if !groups[g] && !(g == GroupSQLite && !dburl.SQLiteLibraries()["mattn"]) {
			t.Errorf("no row of group %s", g)
		}
	}
	checkRuns(t, res, 2)
}

// TestScaleRunsFillOnce: with Runs 2 the scale rows are each measured
// twice, on one fill.
func TestScaleRunsFillOnce(t *testing.T) {
	t.Parallel()
	const keys = 8000 // prune budgets of several batches, so that each run gets some
	c := []int{1}
	var progress bytes.Buffer
	res, err := Run(t.Context(), &Options{Groups: []string{GroupScale}, Keys: keys, Duration: 500 * time.Millisecond,
		Concurrency: c, Runs: 2, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	checkScale(t, res, keys, c)
	checkRuns(t, res, 2)
	if n := strings.Count(progress.String(), "scale: filling the ledger"); n != 1 {
		t.Errorf("the ledger was filled %d times, want once:\n%s", n, progress.String())
	}
	for _, what := range []string{"scale claim+complete, 1 caller", "scale replay, 1 caller", "scale claim+complete while pruning, 1 caller"} {
		if n := strings.Count(progress.String(), what); n != 2 {
			t.Errorf("%q measured %d times, want 2:\n%s", what, n, progress.String())
		}
	}
	for _, r := range res {
		if strings.Contains(r.Note, "whose baseline measured something") {
			t.Errorf("%s: a run measured nothing: %s", r.Name, r.Note)
		}
		if (strings.HasPrefix(r.Name, "scale claim+complete at") || strings.HasPrefix(r.Name, "scale prune")) && !strings.Contains(r.Note, "one fill") {
			t.Errorf("%s: note %q does not say the runs were on one fill", r.Name, r.Note)
		}
	}
}
