package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
)

func TestReconcileParkedAsSucceeded(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	file := filepath.Join(t.TempDir(), "charge.json")
	if err := os.WriteFile(file, []byte(`{"id":"ch_9"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := opRun(t, "", "reconcile", "--db", s.url, "", "parked-1", "--as", "succeeded", "--status", "201", "--result", file).must(t, 0)
	if !strings.Contains(r.stdout, "resolved scope \"\" key parked-1 as succeeded") || !strings.Contains(r.stdout, `{"id":"ch_9"}`) {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "operator resolved a claim") || !strings.Contains(r.stderr, "key=parked-1") {
		t.Errorf("no audit line on stderr: %s", r.stderr)
	}
	rec, err := s.get(t, "", "parked-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idemtype.StateSucceeded || rec.Status != 201 || string(rec.Body) != `{"id":"ch_9"}` || rec.Fingerprint != "fp-parked" {
		t.Errorf("record after reconcile: %+v", rec)
	}
	// Done is done: a second decision is refused.
	r = opRun(t, "", "reconcile", "--db", s.url, "", "parked-1", "--as", "release").must(t, 1)
	if !strings.Contains(r.stderr, "is succeeded, not parked or in progress") {
		t.Errorf("second reconcile: %s", r.stderr)
	}
}

func TestReconcileRefusesALiveLeaseUnlessForced(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	r := opRun(t, "", "reconcile", "--db", s.url, "", "live-1", "--as", "release").must(t, 1)
	if !strings.Contains(r.stderr, "refused") || !strings.Contains(r.stderr, "live lease") || !strings.Contains(r.stderr, "--force") || r.stdout != "" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if rec, _ := s.get(t, "", "live-1"); rec.State != idemtype.StateInProgress {
		t.Fatalf("refused reconcile changed the record: %s", rec.State)
	}
	r = opRun(t, "", "reconcile", "--db", s.url, "", "live-1", "--as", "release", "--force", "--json").must(t, 0)
	var rec recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.State != idemtype.StateReleased {
		t.Errorf("forced: %v %+v", err, rec)
	}
}

func TestReconcileStaleFromStdinWithHashedLogs(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	r := opRun(t, "declined by provider", "reconcile", "--db", s.url, "--hash-keys", "--log-format", "json",
		"--as", "failed", "--status", "402", "--result", "-", "", "stale-1").must(t, 0)
	if strings.Contains(r.stderr, "stale-1") || !strings.Contains(r.stderr, idem.KeyHash("stale-1")) {
		t.Errorf("--hash-keys: the key leaked or its hash is missing: %s", r.stderr)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &line); err != nil || line["as"] != "failed" {
		t.Errorf("--log-format json: %v %s", err, r.stderr)
	}
	rec, _ := s.get(t, "", "stale-1")
	if rec.State != idemtype.StateFailed || string(rec.Body) != "declined by provider" || rec.Status != 402 {
		t.Errorf("record: %+v", rec)
	}
}

func TestReconcileRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"", "parked-1"}, 2, "--as is required"},
		{[]string{"", "parked-1", "--as", "maybe"}, 2, `--as "maybe"`},
		{[]string{"", "parked-1", "--as", "release", "--status", "200"}, 2, "stores no result"},
		{[]string{"parked-1", "--as", "release"}, 2, "want SCOPE and KEY"},
		{[]string{"", "parked-1", "--as", "succeeded", "--result", "/no/such/file"}, 2, "--result"},
		{[]string{"", "parked-1", "--as", "succeeded", "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"", "nobody", "--as", "release"}, 1, "no record for scope \"\" key nobody"},
	} {
		r := opRun(t, "", append([]string{"reconcile", "--db", s.url}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.has) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", c.args, r.code, c.code, r.stderr, c.has)
		}
	}
	if rec, _ := s.get(t, "", "parked-1"); rec.State != idemtype.StateParked {
		t.Errorf("a refused command changed the record: %s", rec.State)
	}
}

// TestReconcileHTTPRecordNeedsAStatus: a record made by the HTTP layer is
// not resolved as succeeded without --status (it would replay as an
// empty 200 for the whole retention), a body needs its Content-Type, and
// what is stored replays through the middleware (issue 10 item 11).
func TestReconcileHTTPRecordNeedsAStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "idem.db")
	ctx := context.Background()
	l, err := dburl.Open(ctx, db, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := idemhttp.Middleware(l, &idemhttp.Options{Logger: slog.New(slog.DiscardHandler), AnonymousScope: idemhttp.AnonymousShared})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Unknown(r.Context()) // the upstream timed out: outcome unknown
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	charge := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1000}`))
		req.Header.Set("Idempotency-Key", "order-42")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	charge()
	l.Close()
	body := filepath.Join(dir, "charge.json")
	os.WriteFile(body, []byte(`{"id":"ch_42"}`), 0o600)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--as", "succeeded"}, "a status is required"},
		{[]string{"--as", "succeeded", "--result", body}, "a status is required"},
		{[]string{"--as", "succeeded", "--status", "201", "--result", body}, "needs a Content-Type"},
		{[]string{"--as", "succeeded", "--status", "201", "--header", "Set-Cookie: a=b"}, "cannot be stored"},
	} {
		r := opRun(t, "", append([]string{"reconcile", "--db", db, "--force", "", "order-42"}, tc.args...)...).must(t, 1)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, r.stderr, tc.want)
		}
	}
	if r := opRun(t, "", "reconcile", "--db", db, "--force", "", "order-42", "--as", "release", "--header", "Content-Type: text/plain").must(t, 2); !strings.Contains(r.stderr, "stores no result") {
		t.Errorf("release with --header: %q", r.stderr)
	}
	opRun(t, "", "reconcile", "--db", db, "--force", "", "order-42", "--as", "succeeded", "--status", "201",
		"--header", "Content-Type: application/json", "--result", body).must(t, 0)

	l, err = dburl.Open(ctx, db, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h = idemhttp.Middleware(l, &idemhttp.Options{Logger: slog.New(slog.DiscardHandler), AnonymousScope: idemhttp.AnonymousShared})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a resolved key ran again")
	}))
	if rec := charge(); rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"id":"ch_42"}` {
		t.Errorf("replay: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
}

// TestReconcileOtherRecordTakesNoHeaders: headers are for HTTP records.
func TestReconcileOtherRecordTakesNoHeaders(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	r := opRun(t, "", "reconcile", "--db", s.url, "", "parked-1", "--as", "succeeded", "--header", "Content-Type: text/plain").must(t, 1)
	if !strings.Contains(r.stderr, "only for records made by the HTTP layer") {
		t.Errorf("stderr: %q", r.stderr)
	}
	if rec, _ := s.get(t, "", "parked-1"); rec.State != idemtype.StateParked {
		t.Errorf("record changed: %s", rec.State)
	}
}
