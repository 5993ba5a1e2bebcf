package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

func TestKeysAloneListsSubcommands(t *testing.T) {
	t.Parallel()
	r := opRun(t, "", "keys").must(t, 2) // like idem alone: help on stderr
	if !strings.Contains(r.stderr, "list") || !strings.Contains(r.stderr, "show") {
		t.Errorf("idem keys:\n%s", r.stderr)
	}
	r = opRun(t, "", "keys", "drop").must(t, 2)
	if !strings.Contains(r.stderr, `unknown subcommand "drop"`) {
		t.Errorf("stderr: %s", r.stderr)
	}
}

func TestKeysList(t *testing.T) {
	t.Parallel()
	s := opSeed(t)

	r := opRun(t, "", "keys", "list", "--db", s.url).must(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 9 || !strings.HasPrefix(lines[0], "SCOPE") {
		t.Fatalf("want a header and 8 rows:\n%s", r.stdout)
	}
	for _, want := range []string{"acct-1  done-1", "stale: lease ended", "lease ends in", "waits for idem reconcile", "replayed until"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, `""      parked-1`) {
		t.Errorf("the empty scope should print as \"\":\n%s", r.stdout)
	}

	var recs []recordJSON
	r = opRun(t, "", "keys", "list", "--db", s.url, "--state", "parked", "--json").must(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if len(recs) != 1 || recs[0].Key != "parked-1" || recs[0].State != "parked" || recs[0].Fingerprint != "fp-parked" || recs[0].Result != nil {
		t.Errorf("parked: %+v", recs)
	}

	r = opRun(t, "", "keys", "list", "--db", s.url, "--stale", "--json").must(t, 0)
	recs = nil
	json.Unmarshal([]byte(r.stdout), &recs)
	if len(recs) != 1 || recs[0].Key != "stale-1" || !recs[0].Stale {
		t.Errorf("stale: %+v", recs)
	}

	r = opRun(t, "", "keys", "list", "--scope", "acct-1", "--db", s.url, "--json").must(t, 0)
	recs = nil
	json.Unmarshal([]byte(r.stdout), &recs)
	if len(recs) != 2 {
		t.Errorf("scope acct-1: %+v", recs)
	}

	r = opRun(t, "", "keys", "list", "--db", s.url, "--limit", "2").must(t, 0)
	if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 2 || !strings.Contains(r.stderr, "showing the first 2") {
		t.Errorf("limit: %d rows, stderr %q", n, r.stderr)
	}
	r = opRun(t, "", "keys", "list", "--db", s.url, "--json", "--state", "released").must(t, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("an empty list is [] in JSON, got %s", r.stdout)
	}
}

func TestKeysListRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	for _, args := range [][]string{
		{"--state", "done"}, {"--limit", "0"}, {"--stale", "--state", "parked"}, {"extra"},
	} {
		r := opRun(t, "", append([]string{"keys", "list", "--db", s.url}, args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--help)") {
			t.Errorf("%v: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	r := opRun(t, "", "keys", "list", "--db", "sqlite:"+t.TempDir()+"/typo.db").must(t, 1)
	if !strings.Contains(r.stderr, "no database at") {
		t.Errorf("missing file: %s", r.stderr)
	}
	r = opRun(t, "", "keys", "list", "--db", "mysql://x").must(t, 2)
	if !strings.Contains(r.stderr, "unknown database scheme") {
		t.Errorf("bad scheme: %s", r.stderr)
	}
}

func TestKeysUsesIDEMDB(t *testing.T) { // not parallel: sets the environment
	s := opSeed(t)
	t.Setenv("IDEM_DB", s.url)
	r := opRun(t, "", "keys", "show", "acct-1", "done-1").must(t, 0)
	if !strings.Contains(r.stdout, "done-1") {
		t.Errorf("show via IDEM_DB:\n%s", r.stdout)
	}
}

func TestKeysShow(t *testing.T) {
	t.Parallel()
	s := opSeed(t)

	r := opRun(t, "", "keys", "show", "--db", s.url, "acct-1", "done-1").must(t, 0)
	for _, want := range []string{"state:", "succeeded", "fp-done", "status 201, body 13 bytes", `{"id":"ch_1"}`, "key hash:", "sha256:", "replayed until", "Content-Type"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	r = opRun(t, "", "keys", "show", "acct-1", "done-1", "--db", s.url, "--json", "--preview", "4").must(t, 0)
	var rec recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rec.Result == nil || rec.Result.Status != 201 || rec.Result.Body != `{"id` || !rec.Result.BodyTruncated ||
		rec.Result.BodyBytes != 13 || rec.Result.BodyEncoding != "utf-8" || rec.Attempt != 1 || rec.ExpiresAt == nil {
		t.Errorf("json: %+v %+v", rec, rec.Result)
	}

	r = opRun(t, "", "keys", "show", "--db", s.url, "", "binary-1").must(t, 0)
	if !strings.Contains(r.stdout, "base64:") || !strings.Contains(r.stdout, "(512 of 2000 bytes)") {
		t.Errorf("binary body preview:\n%s", r.stdout)
	}

	r = opRun(t, "", "keys", "show", "--db", s.url, "", "live-1").must(t, 0)
	if !strings.Contains(r.stdout, "lease until:") || strings.Contains(r.stdout, "result:") {
		t.Errorf("in-progress record:\n%s", r.stdout)
	}

	r = opRun(t, "", "keys", "show", "--db", s.url, "acct-2", "done-1").must(t, 1)
	if !strings.Contains(r.stderr, "no record for scope acct-2 key done-1") {
		t.Errorf("not found: %s", r.stderr)
	}
	opRun(t, "", "keys", "show", "--db", s.url, "done-1").must(t, 2)
}

// TestKeysListShortScopesAndKeyFilter: the gateway's 85-character scopes
// are shortened in the table (whole with --wide and --json), and --key
// finds a key in every scope, or in one (issue 10 item 4).
func TestKeysListShortScopesAndKeyFilter(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	long := "authorization-hmac:" + strings.Repeat("3f9a1c0b", 8)
	for _, op := range []idem.Op{{Scope: long, Key: "order-42"}, {Scope: "acct-1", Key: "order-42"}, {Scope: "acct-1", Key: "order-43"}} {
		if _, err := l.Claim(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	r := opRun(t, "", "keys", "list", "--db", url).must(t, 0)
	if strings.Contains(r.stdout, long) || !strings.Contains(r.stdout, "authorization-hmac:3f9a1c0b3f9a… ") {
		t.Errorf("table does not shorten the long scope:\n%s", r.stdout)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if len([]rune(line)) > 120 {
			t.Errorf("line of %d characters:\n%s", len([]rune(line)), line)
		}
	}
	if r := opRun(t, "", "keys", "list", "--db", url, "--wide").must(t, 0); !strings.Contains(r.stdout, long) {
		t.Errorf("--wide does not show the whole scope:\n%s", r.stdout)
	}
	var recs []recordJSON
	r = opRun(t, "", "keys", "list", "--db", url, "--key", "order-42", "--json").must(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Key != "order-42" || recs[1].Key != "order-42" || (recs[0].Scope != long && recs[1].Scope != long) {
		t.Errorf("--key order-42: %+v", recs)
	}
	recs = nil
	r = opRun(t, "", "keys", "list", "--db", url, "--key", "order-42", "--scope", "acct-1", "--json").must(t, 0)
	json.Unmarshal([]byte(r.stdout), &recs)
	if len(recs) != 1 || recs[0].Scope != "acct-1" {
		t.Errorf("--key order-42 --scope acct-1: %+v", recs)
	}
	r = opRun(t, "", "keys", "list", "--db", url, "--key", "nope").must(t, 0)
	if strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Errorf("--key nope lists records:\n%s", r.stdout)
	}
}
