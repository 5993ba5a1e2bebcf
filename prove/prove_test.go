package prove

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
)

// Workers are this test binary run again (the helper-process idiom):
// TestMain sees WorkerEnv and runs the worker instead of the tests.
func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(WorkerMain(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// testOps is small: every scenario runs, none for long.
const testOps = 6

// testConfig is a small run on db. IDEM_PROVE_SEED repeats a run's
// choices; the seed is logged either way.
// runLogged runs cfg within timeout, logs the report's table and returns
// the report; an error ends the test.
func runLogged(t *testing.T, cfg Config, timeout time.Duration) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	WriteTable(&table, rep)
	t.Logf("\n%s", table.String())
	return rep
}

func testConfig(t *testing.T, db string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("IDEM_PROVE_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("IDEM_PROVE_SEED: %v", err)
		}
	}
	t.Logf("seed %d (repeat with IDEM_PROVE_SEED=%d)", seed, seed)
	return Config{
		DB: db, Ops: testOps, Workers: 2, Lease: 250 * time.Millisecond, Seed: seed,
		Worker: []string{exe},
	}
}

// binDir holds the idem binary built for the gateway scenario.
var binDir string

var idemBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "idem-prove-test-*")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "idem")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/idem").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// serveCommand builds idem once (for `idem serve`, which the gateway
// scenario runs) and returns the command.
func serveCommand(t *testing.T) []string {
	t.Helper()
	bin, err := idemBin()
	if err != nil {
		t.Fatalf("go build ./cmd/idem: %v", err)
	}
	return []string{bin, "serve"}
}

func requirePostgres(t *testing.T) {
	t.Helper()
	pgtest.RequireBinaries(t)
}

// TestScenarios runs every scenario, small, on each driver: each must
// hold, with exactly one effect per operation (at most one where the
// provider can neither deduplicate nor be asked, and the claim parks).
func TestScenarios(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			if driver == "postgres" {
				requirePostgres(t)
			}
			cfg := testConfig(t, driver)
			cfg.Serve = serveCommand(t)
			cfg.Scenarios = ownTest(false)
			// Ten minutes: broker-redelivery boots and restarts a RabbitMQ.
			rep := runLogged(t, cfg, 10*time.Minute)
			ran := map[string]bool{}
			for _, r := range rep.Results {
				ran[r.Name] = true
				t.Run(r.Name, func(t *testing.T) {
					if r.Skipped {
						if r.Name == "db-restart" && driver == "postgres" {
							t.Fatalf("db-restart skipped on a cluster the prover owns: %s", r.Reason)
						}
						t.Skip(r.Reason)
					}
					checkHolds(t, r)
				})
			}
			for _, s := range Scenarios() {
				if ownTests[s.Name] {
					continue
				}
				if !ran[s.Name] && !ran[s.Name+"/"+firstVariant(s)] {
					t.Errorf("scenario %s did not run", s.Name)
				}
			}
		})
	}
}

// ownTests are the scenarios that start clusters of their own (a primary
// and a standby), a proxy or a broker: TestFailoverScenarios runs the
// first two, TestBrokerKafka and the broker packages' TestAttack
// (broker/jetstream, broker/rabbitmq) run broker-redelivery's variants,
// so that TestScenarios does not take too long.
var ownTests = map[string]bool{"failover": true, "ambiguous-commit": true, "broker-redelivery": true}

// ownTest lists the scenarios in ownTests (own) or not in it.
func ownTest(own bool) []string {
	var out []string
	for _, s := range Scenarios() {
		if ownTests[s.Name] == own {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestFailoverScenarios runs failover (sync and async) and
// ambiguous-commit, small, on PostgreSQL: sync and ambiguous-commit must
// hold with one effect per operation, async must detect its loss.
func TestFailoverScenarios(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	cfg := testConfig(t, "postgres")
	cfg.Scenarios = []string{"failover", "ambiguous-commit"}
	rep := runLogged(t, cfg, 5*time.Minute)
	if len(rep.Results) != 3 {
		t.Fatalf("%d rows, want failover/sync, failover/async, ambiguous-commit", len(rep.Results))
	}
	for _, r := range rep.Results {
		t.Run(r.Name, func(t *testing.T) {
			if r.Skipped {
				t.Fatalf("%s skipped on a cluster the prover owns: %s", r.Name, r.Reason)
			}
			checkHolds(t, r)
		})
	}
}

func firstVariant(s Scenario) string {
	if len(s.Variants) == 0 {
		return ""
	}
	return s.Variants[0]
}

// checkHolds fails t unless r holds with the effects its scenario allows.
func checkHolds(t *testing.T, r Result) {
	t.Helper()
	if !r.OK {
		t.Errorf("%s failed: %+v", r.Name, r)
	}
	if r.Name == "failover/async" {
		// Asynchronous replication may lose acknowledged commits (likely,
		// not certain, with a few operations); the check counts them.
		// (A lost enqueue runs again as another job: a mix-up of the
		// same loss.)
		if r.Duplicates != 0 || r.Stuck != 0 || r.Unfinished != 0 || r.Effects < r.Ops-r.Lost || r.Effects > r.Ops {
			t.Errorf("%s: lost %d effects %d duplicates %d stuck %d unfinished %d; want a detected loss and nothing else",
				r.Name, r.Lost, r.Effects, r.Duplicates, r.Stuck, r.Unfinished)
		}
		return
	}
	if r.Duplicates != 0 || r.Lost != 0 || r.MixUps != 0 || r.Stuck != 0 || r.Unfinished != 0 {
		t.Errorf("%s: duplicates %d lost %d mixups %d stuck %d unfinished %d, want all 0",
			r.Name, r.Duplicates, r.Lost, r.MixUps, r.Stuck, r.Unfinished)
	}
	switch {
	case strings.HasSuffix(r.Name, "blind"):
		if r.Effects > r.Ops || r.Effects < r.Ops-r.Parked {
			t.Errorf("%s: %d effects, %d parked, want between ops-parked and ops (%d)", r.Name, r.Effects, r.Parked, r.Ops)
		}
	case r.Effects != r.Ops:
		t.Errorf("%s: %d effects for %d operations, want one each", r.Name, r.Effects, r.Ops)
	}
	if r.Attempts < r.Ops {
		t.Errorf("%s: %d attempts for %d operations", r.Name, r.Attempts, r.Ops)
	}
	if strings.HasPrefix(r.Name, "multi-step/") && r.Unknown == 0 {
		t.Errorf("%s: no run was killed mid-way", r.Name)
	}
	// Every paused holder's write is fenced; a finisher whose heartbeats a
	// loaded machine kept out for a lease may add fenced attempts of its
	// own (it retries), so more than Ops is fine.
	if r.Name == "pause-past-lease" && r.Fenced < r.Ops {
		t.Errorf("pause-past-lease: %d fenced writes, want at least %d", r.Fenced, r.Ops)
	}
	if r.Name == "replay-batch" && r.Expired < r.Ops {
		t.Errorf("replay-batch: %d expired replays, want at least %d", r.Expired, r.Ops)
	}
}

// TestNoGuardFails shows that the prover can fail: workers that skip the
// ledger must turn every attack that needs the guard into duplicates.
// (docs/prove.md shows a whole run without the guard.)
func TestNoGuardFails(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "")
	cfg.NoGuard = true
	// One attack on each guard: the claim, the done mark, the fence.
	cfg.Scenarios = []string{"crash-after-commit", "duplicate-delivery", "pause-past-lease"}
	rep := runLogged(t, cfg, 5*time.Minute)
	if rep.OK {
		t.Fatal("a run without the guard passed")
	}
	for _, r := range rep.Results {
		if r.OK || r.Duplicates == 0 {
			t.Errorf("%s without the guard: ok=%v with %d duplicates, want FAIL with duplicates", r.Name, r.OK, r.Duplicates)
		}
	}
	var table bytes.Buffer
	WriteTable(&table, rep)
	if !strings.Contains(table.String(), "FAIL: ") || !strings.Contains(table.String(), "--seed") {
		t.Errorf("the table does not say FAIL and how to repeat:\n%s", table.String())
	}
}

// TestMultiStepNoGuardFails shows that multi-step can fail: workers that
// perform the three steps without Ledger.Run redo the steps a killed
// worker had done. The seed is fixed so that every variant's crash points
// fall after a committed row (a kill before the row's commit, redone,
// leaves no duplicate).
func TestMultiStepNoGuardFails(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "")
	cfg.Seed = multiStepNoGuardSeed
	cfg.NoGuard = true
	cfg.Scenarios = []string{"multi-step"}
	rep := runLogged(t, cfg, 5*time.Minute)
	if len(rep.Results) != 2 {
		t.Fatalf("%d rows, want multi-step/lookup and multi-step/blind", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.OK || r.Duplicates == 0 || !strings.Contains(strings.Join(r.Failures, "\n"), "steps with more than one effect") {
			t.Errorf("%s without the guard: ok=%v with %d duplicates (%q), want FAIL naming the repeated steps", r.Name, r.OK, r.Duplicates, r.Failures)
		}
	}
}

// multiStepNoGuardSeed is a seed whose crash points (multi-step, testOps
// operations, two workers) all leave a step to be redone.
const multiStepNoGuardSeed = 1

// TestCheck judges a made-up history against made-up effects: the checker
// itself must count what it claims to.
func TestCheck(t *testing.T) {
	tr := &trial{
		r:        &runner{cfg: Config{}},
		keys:     []string{"dup", "lost", "mixed", "fine", "unknown-only", "unknown-then-ok"},
		h:        newHistory(),
		noLedger: true,
	}
	effects := map[string][]string{
		"dup":             {"a", "b"},
		"mixed":           {"m1"},
		"fine":            {"f"},
		"unknown-then-ok": {"u"},
	}
	tr.effects = func(context.Context) (map[string][]string, error) { return effects, nil }
	add := func(proc, op, typ, value string) {
		if err := tr.h.add(Event{Proc: proc, Op: op, Type: typ, Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(proc, op, value string) { add(proc, op, Invoke, ""); add(proc, op, OK, value) }
	ok("p1", "dup", "a")
	ok("p2", "dup", "b")
	ok("p1", "lost", "l")
	ok("p1", "mixed", "m1")
	ok("p2", "mixed", "m2")
	ok("p1", "fine", "f")
	add("p1", "unknown-only", Invoke, "")
	tr.h.abandon("p1", "process killed")
	add("p3", "unknown-then-ok", Invoke, "")
	add("p3", "unknown-then-ok", Unknown, "")
	ok("p3", "unknown-then-ok", "u")

	r := tr.check(context.Background(), Result{Ops: len(tr.keys)})
	want := Result{Ops: 6, Attempts: 9, Effects: 5, Duplicates: 1, Lost: 1, Unknown: 2, MixUps: 2, Unfinished: 1}
	got := r
	got.Failures, got.Notes, got.OK = nil, nil, false
	if got.Attempts != want.Attempts || got.Effects != want.Effects || got.Duplicates != want.Duplicates ||
		got.Lost != want.Lost || got.Unknown != want.Unknown || got.MixUps != want.MixUps || got.Unfinished != want.Unfinished {
		t.Errorf("check counted %+v, want %+v", got, want)
	}
	if r.OK {
		t.Error("check passed a history with a duplicate, a loss and a mix-up")
	}
	// "unknown-only" had no effect and no ok: unknown is honest, not lost.
	for _, f := range r.Failures {
		if strings.Contains(f, "lost") && strings.Contains(f, "unknown-only") {
			t.Errorf("an operation whose only attempt was killed was counted lost: %s", f)
		}
	}
}

func TestHistory(t *testing.T) {
	h := newHistory()
	if err := h.add(Event{Proc: "pid 1/g0", Op: "k", Type: OK}); err == nil {
		t.Error("an answer without an invoke was accepted")
	}
	h.add(Event{Proc: "pid 1/g0", Op: "k", Type: Invoke})
	h.add(Event{Proc: "pid 1/g1", Op: "j", Type: Invoke})
	h.add(Event{Proc: "pid 11/g0", Op: "x", Type: Invoke})
	h.abandon("pid 1/", "process killed")
	evs := h.snapshot()
	var unknown []string
	for _, e := range evs {
		if e.Type == Unknown {
			unknown = append(unknown, e.Op+" "+e.Err)
		}
	}
	if strings.Join(unknown, ",") != "k process killed,j process killed" {
		t.Errorf("abandon ended %q, want k and j (not pid 11's x)", unknown)
	}
	if attempts, settled, u := h.stats(); attempts != 3 || settled != 0 || u != 2 {
		t.Errorf("stats %d %d %d, want 3 0 2", attempts, settled, u)
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios(nil)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ss []selected) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.name())
		}
		return strings.Join(out, " ")
	}
	if !strings.Contains(names(all), "crash-after-call/keyed crash-after-call/lookup crash-after-call/blind") ||
		!strings.Contains(names(all), "multi-step/lookup multi-step/blind") {
		t.Errorf("all scenarios: %s", names(all))
	}
	some, err := selectScenarios([]string{"replay-batch,crash-after-call/blind", "crash-before-call"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(some); got != "crash-before-call crash-after-call/blind replay-batch" {
		t.Errorf("selected %q, want the report's order", got)
	}
	if _, err := selectScenarios([]string{"crash-after-lunch"}); err == nil || !strings.Contains(err.Error(), "crash-after-lunch") {
		t.Errorf("unknown scenario: %v", err)
	}
	for _, s := range Scenarios() {
		if s.Summary == "" {
			t.Errorf("%s has no summary", s.Name)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	rep := &Report{Seed: 7, Driver: "sqlite", Ops: 3, Results: []Result{{Name: "x", Ops: 3, Effects: 3, OK: true}}, OK: true}
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Seed      int64            `json:"seed"`
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"name", "ops", "effects", "duplicates", "lost", "unknown", "ok"} {
		if _, ok := got.Scenarios[0][f]; !ok {
			t.Errorf("JSON scenario has no %q: %s", f, b.String())
		}
	}
}
