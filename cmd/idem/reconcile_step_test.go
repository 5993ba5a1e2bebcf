package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
)

// TestReconcileStep: reconcile --step resolves a parked run's started step
// (done with a JSON result, or not done), hands the run back so that the
// next attempt resumes it, and refuses what it cannot honestly do.
func TestReconcileStep(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	down := errors.New("provider down")
	calls := 0
	book := func(fail bool) idem.RunFunc {
		return func(r *idem.Run) (idem.Result, error) {
			if _, err := idem.TxStep(r, "create-ride", func(context.Context, *sql.Tx) (string, error) { return "ride", nil }); err != nil {
				return idem.Result{}, err
			}
			ch, err := idem.CallStep(r, "charge", func(context.Context, string) (string, error) {
				calls++
				if fail {
					return "", down
				}
				return "ch_called", nil
			})
			return idem.Result{Status: 201, Body: []byte(ch)}, err
		}
	}
	park := func(key string) idem.Op {
		t.Helper()
		op := idem.Op{Scope: "acct-1", Key: key, Fingerprint: "fp"}
		if _, err := l.Run(ctx, op, book(true)); !errors.Is(err, down) {
			t.Fatal(err)
		}
		if _, err := l.Run(ctx, op, book(true)); !errors.Is(err, idem.ErrParked) {
			t.Fatalf("%v, want parked", err)
		}
		return op
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad := write("good.json", "\"ch_manual\"\n"), write("bad.json", `{"id":`)
	rc := func(args ...string) opResult {
		return opRun(t, "", append([]string{"reconcile", "--db", url}, args...)...)
	}

	op := park("ride-1")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--step", "charge", "--as", "done"}, 2, "needs --result"},
		{[]string{"--step", "charge", "--as", "succeeded", "--result", good}, 2, "want done or not-done"},
		{[]string{"--step", "charge", "--as", "not-done", "--result", good}, 2, "stores no result"},
		{[]string{"--step", "charge", "--as", "done", "--status", "201", "--result", good}, 2, "drop --status"},
		{[]string{"--step", "nope", "--as", "not-done"}, 1, "has no step nope"},
		{[]string{"--step", "create-ride", "--as", "not-done"}, 1, "is done, not started"},
		{[]string{"--step", "charge", "--as", "done", "--result", bad}, 1, "not JSON"},
		{[]string{"--step", "charge", "--as", "not-done", "acct-1", "no-such-key"}, 1, "no record"},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "no-such-key") {
			args = append(args, "acct-1", "ride-1")
		}
		r := rc(args...).must(t, tc.code)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, r.stderr, tc.want)
		}
	}
	if rec, _ := l.Get(ctx, "acct-1", "ride-1"); rec.State != idemtype.StateParked {
		t.Fatalf("refusals changed the record: %s", rec.State)
	}
	r := rc("acct-1", "ride-1", "--step", "charge", "--as", "done", "--result", good).must(t, 0)
	for _, want := range []string{`resolved step charge of scope acct-1 key ride-1 as done`, `1\s+charge\s+done\s+\d+\s+11 bytes`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("stdout lacks %s:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "operator resolved a step") || !strings.Contains(r.stderr, "step=charge") {
		t.Errorf("no audit line: %s", r.stderr)
	}
	calls = 0
	res, err := l.Run(ctx, op, book(false))
	if err != nil || string(res.Body) != "ch_manual" || calls != 0 {
		t.Fatalf("resumed: %q, %v, %d calls; want the operator's result and no call", res.Body, err, calls)
	}

	// Not done, as JSON: the step goes, the run is handed back.
	op = park("ride-2")
	r = rc("--json", "--step", "charge", "--as", "not-done", "acct-1", "ride-2").must(t, 0)
	var rec recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rec.State != idemtype.StateInProgress || !rec.Stale || len(rec.Steps) != 1 || rec.Steps[0].Name != "create-ride" {
		t.Fatalf("json: %+v", rec)
	}
	calls = 0
	if res, err := l.Run(ctx, op, book(false)); err != nil || string(res.Body) != "ch_called" || calls != 1 {
		t.Fatalf("resumed: %q, %v, %d calls; want the step called once", res.Body, err, calls)
	}

	// A live holder is refused without --force.
	c, err := l.Claim(ctx, idem.Op{Scope: "acct-1", Key: "ride-3", Fingerprint: "fp", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run, err := l.Steps(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.CallStep(run, "charge", func(context.Context, string) (string, error) { return "", down }); !errors.Is(err, down) {
		t.Fatal(err)
	}
	r = rc("acct-1", "ride-3", "--step", "charge", "--as", "not-done").must(t, 1)
	if !strings.Contains(r.stderr, "live lease") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("stderr %q", r.stderr)
	}
	rc("acct-1", "ride-3", "--step", "charge", "--as", "not-done", "--force").must(t, 0)
	if err := l.Complete(ctx, c, idem.Result{Status: 200}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("forced-out holder's completion: %v, want ErrLeaseLost", err)
	}
}
