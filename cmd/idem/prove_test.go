package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/prove"
)

// The prove tests run idemBin, the real idem binary that TestMain builds
// (serve_main_test.go), so that the workers (idem prove-worker) and the
// gateways (idem serve) are what users run.

func runIdem(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("idem %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return code, out.String(), errOut.String()
}

func TestProveHelp(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := dispatch(context.Background(), []string{"prove", "--help"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("prove --help: exit %d, stderr %s", code, errOut.String())
	}
	for _, s := range prove.Scenarios() {
		if !strings.Contains(out.String(), s.Name) || !strings.Contains(out.String(), s.Summary) {
			t.Errorf("prove --help does not describe %s", s.Name)
		}
	}
	for _, want := range []string{"variants: keyed, lookup, blind", "--scenario", "--ops", "--workers", "--seed", "--json", "--target", "--effects-cmd", "target/storm"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("prove --help lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	dispatch(context.Background(), []string{"help"}, nil, &out, &errOut)
	if strings.Contains(out.String(), "prove-worker") {
		t.Errorf("idem help shows the internal prove-worker:\n%s", out.String())
	}
}

func TestProveUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "crash-after-lunch"}, "unknown scenario crash-after-lunch"},
		{[]string{"--ops", "0"}, "--ops and --workers"},
		{[]string{"--workers", "-1"}, "--ops and --workers"},
		{[]string{"--lease", "1ms"}, "--lease"},
		{[]string{"--effects-cmd", "echo 1"}, "--effects-cmd needs --target"},
		{[]string{"--target", "ftp://example.com"}, "not an http:// or https:// URL"},
		{[]string{"--target", "http://127.0.0.1:1", "--scenario", "crash-before-call"}, "unknown scenario"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		code := dispatch(context.Background(), append([]string{"prove"}, tc.args...), nil, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("prove %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestProveRun runs a few scenarios (one through idem serve) with the real
// binary and reads the table, the JSON and the history it writes.
func TestProveRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonFile, historyFile := filepath.Join(dir, "out.json"), filepath.Join(dir, "history.jsonl")
	code, stdout, stderr := runIdem(t, "prove", "--scenario", "crash-after-commit,pause-past-lease", "--scenario", "gateway/attack",
		"--ops", "4", "--workers", "2", "--lease", "300ms", "--seed", "42", "--out", jsonFile, "--history", historyFile)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"driver sqlite (temporary SQLite file), ops 4, workers 2, seed 42",
		"SCENARIO", "ATTEMPTS", "PARKED/UNKNOWN", "VERDICT", "crash-after-commit", "pause-past-lease", "gateway/attack",
		"ok: all 3 scenarios hold"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "[1/3] crash-after-commit") || !strings.Contains(stderr, "[3/3] gateway/attack") {
		t.Errorf("no progress lines on stderr:\n%s", stderr)
	}

	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Seed      int64            `json:"seed"`
		OK        bool             `json:"ok"`
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	if rep.Seed != 42 || !rep.OK || len(rep.Scenarios) != 3 {
		t.Fatalf("--json: seed %d ok %v with %d scenarios:\n%s", rep.Seed, rep.OK, len(rep.Scenarios), b)
	}
	for _, s := range rep.Scenarios {
		for _, f := range []string{"name", "ops", "effects", "duplicates", "lost", "unknown", "ok"} {
			if _, ok := s[f]; !ok {
				t.Errorf("--json scenario lacks %q: %v", f, s)
			}
		}
		if s["effects"] != float64(4) || s["duplicates"] != float64(0) || s["ok"] != true {
			t.Errorf("--json scenario %v: want 4 effects, no duplicates, ok", s)
		}
	}

	h, err := os.ReadFile(historyFile)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(h)), "\n") {
		var e struct{ Scenario, Type, Proc, Op string }
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Scenario == "" || e.Proc == "" || e.Op == "" {
			t.Fatalf("--history line %q: %v", line, err)
		}
		types[e.Type]++
	}
	if types["invoke"] == 0 || types["ok"] == 0 || types["unknown"] == 0 || types["invoke"] != types["ok"]+types["fail"]+types["unknown"] {
		t.Errorf("--history: %v; want every invoke answered by ok, fail or unknown, with kills among them", types)
	}
}

// TestProveNoGuard: without the ledger the prover must fail, exit 1.
func TestProveNoGuard(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runIdem(t, "prove", "--no-guard", "--scenario", "duplicate-delivery", "--ops", "4", "--workers", "2")
	if code != 1 || !strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "NO GUARD") {
		t.Fatalf("exit %d, want 1 with FAIL\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestProveTarget attacks an endpoint that deduplicates nothing and is
// slow, through the gateways the prover starts; the effects command reads
// the endpoint's counts from files.
func TestProveTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	counts := map[string]int{}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || r.URL.Path != "/charges" || key == "" {
			http.Error(w, "want POST /charges with a key", http.StatusBadRequest)
			return
		}
		mu.Lock()
		counts[key]++
		n := counts[key]
		os.WriteFile(filepath.Join(dir, strings.ReplaceAll(key, "/", "_")), []byte(strconv.Itoa(n)), 0o644)
		mu.Unlock()
		if ms, _ := strconv.Atoi(r.Header.Get("X-Prove-Delay")); ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q,"n":%d}`, key, n)
	}))
	defer api.Close()
	effects := fmt.Sprintf(`cat "%s/$(printf %%s "$1" | tr / _)" 2>/dev/null || echo 0`, dir)
	code, stdout, stderr := runIdem(t, "prove", "--target", api.URL+"/charges", "--effects-cmd", effects,
		"--ops", "3", "--workers", "2", "--lease", "1s")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, row := range []string{"target/parallel", "target/dropped", "target/storm"} {
		if !strings.Contains(stdout, row) {
			t.Errorf("no row %s:\n%s", row, stdout)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(counts) != 9 {
		t.Errorf("the endpoint saw %d keys, want 9 (3 operations × 3 attacks): %v", len(counts), counts)
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("key %s reached the endpoint %d times", k, n)
		}
	}
}
