package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
)

// Helpers for the operator commands' tests (keys, reconcile, prune): a
// seeded SQLite ledger, and dispatch with captured output.

// opResult is what one run of the CLI printed and returned.
type opResult struct {
	stdout, stderr string
	code           int
}

// opRun runs the CLI with args (and stdin) and returns its output.
func opRun(t *testing.T, stdin string, args ...string) opResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := dispatch(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return opResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

func (r opResult) must(t *testing.T, code int) opResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// opSeeded is a ledger file holding one record in each interesting state,
// made with clocks moved into the past so that the CLI, on the real clock,
// sees stale leases and ended retentions without anyone sleeping:
//
//	acct-1 / done-1     succeeded, status 201, body {"id":"ch_1"}, replayed for 24h
//	acct-1 / failed-1   failed, status 402
//	"" / parked-1       parked
//	"" / stale-1        in progress, lease ended an hour ago
//	"" / live-1         in progress, lease live for an hour
//	"" / expired-1      succeeded 2h ago, 1h retention: prune tombstones it
//	"" / gone-1         succeeded 3 days ago, 1h retention + 1h tombstone: prune tombstones and deletes it
//	"" / binary-1       succeeded, a binary body of 2000 bytes
type opSeeded struct {
	url string
}

func opSeed(t *testing.T) opSeeded {
	t.Helper()
	return opSeedAt(t, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"))
}

// opSeedAt is opSeed on the database url.
func opSeedAt(t *testing.T, url string) opSeeded {
	t.Helper()
	ctx := context.Background()
	open := func(shift time.Duration, o idem.Options) *idem.Ledger {
		t.Helper()
		o.Clock = func() time.Time { return time.Now().Add(shift) }
		o.Logger = slog.New(slog.DiscardHandler)
		l, err := dburl.Open(ctx, url, &o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	claim := func(l *idem.Ledger, op idem.Op) *idem.Claim {
		t.Helper()
		c, err := l.Claim(ctx, op)
		if err != nil || !c.Outcome.Held() {
			t.Fatalf("seed claim %q: %v %v", op.Key, c, err)
		}
		return c
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	now := open(0, idem.Options{})
	check(now.Complete(ctx, claim(now, idem.Op{Scope: "acct-1", Key: "done-1", Fingerprint: "fp-done"}), idem.Result{Status: 201, Body: []byte(`{"id":"ch_1"}`), Meta: []byte(`{"Content-Type":["application/json"]}`)}))
	check(now.Fail(ctx, claim(now, idem.Op{Scope: "acct-1", Key: "failed-1"}), idem.Result{Status: 402, Body: []byte("declined")}))
	check(now.Park(ctx, claim(now, idem.Op{Key: "parked-1", Fingerprint: "fp-parked"})))
	claim(now, idem.Op{Key: "live-1", Lease: time.Hour})
	bin := bytes.Repeat([]byte{0xff, 0x00, 0xfe}, 667)[:2000]
	check(now.Complete(ctx, claim(now, idem.Op{Key: "binary-1"}), idem.Result{Status: 200, Body: bin}))
	now.Close()

	hourAgo := open(-time.Hour, idem.Options{})
	claim(hourAgo, idem.Op{Key: "stale-1", Lease: 30 * time.Second})
	hourAgo.Close()

	twoHoursAgo := open(-2*time.Hour, idem.Options{Retention: time.Hour})
	check(twoHoursAgo.Complete(ctx, claim(twoHoursAgo, idem.Op{Key: "expired-1"}), idem.Result{Status: 200, Body: []byte("x")}))
	twoHoursAgo.Close()

	daysAgo := open(-72*time.Hour, idem.Options{Retention: time.Hour, TombstoneTTL: time.Hour})
	check(daysAgo.Complete(ctx, claim(daysAgo, idem.Op{Key: "gone-1"}), idem.Result{Status: 200, Body: []byte("y")}))
	daysAgo.Close()
	return opSeeded{url: url}
}

// get reads one record straight from the ledger.
func (s opSeeded) get(t *testing.T, scope, key string) (idemtype.Record, error) {
	t.Helper()
	l, err := dburl.Open(context.Background(), s.url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Get(context.Background(), scope, key)
}

func TestOperatorCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"keys", "--help"}, {"keys", "list", "--help"}, {"keys", "show", "-h"},
		{"reconcile", "--help"}, {"prune", "--help"}, {"help", "prune"},
	} {
		r := opRun(t, "", args...).must(t, 0)
		if !strings.Contains(r.stdout, "Usage: idem") || !strings.Contains(r.stdout, "Exit codes: 0 success; 1") {
			t.Errorf("%v: help lacks usage or exit codes:\n%s", args, r.stdout)
		}
		if r.stderr != "" {
			t.Errorf("%v: help wrote to stderr: %s", args, r.stderr)
		}
	}
	if r := opRun(t, "", "keys", "list", "--no-such-flag"); r.code != 2 || !strings.Contains(r.stderr, "no-such-flag") {
		t.Errorf("bad flag: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestParseArgsMixesFlagsAndArguments(t *testing.T) {
	t.Parallel()
	fs := newFlagSet("x", "x", io.Discard)
	as := fs.String("as", "", "")
	force := fs.Bool("force", false, "")
	pos, _, done := parseArgs(fs, []string{"scope", "--as", "release", "key", "--force"}, io.Discard)
	if done || len(pos) != 2 || pos[0] != "scope" || pos[1] != "key" || *as != "release" || !*force {
		t.Errorf("got %q as=%q force=%v done=%v", pos, *as, *force, done)
	}
	fs = newFlagSet("x", "x", io.Discard)
	fs.Bool("force", false, "")
	pos, _, _ = parseArgs(fs, []string{"", "--", "-dash-key", "--force"}, io.Discard)
	if len(pos) != 3 || pos[0] != "" || pos[1] != "-dash-key" || pos[2] != "--force" {
		t.Errorf("after --: got %q", pos)
	}
}

func TestPrintableAndPreview(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-42": "order-42", "": `""`, "a b": "a b", " pad": `" pad"`,
		"line\nforged": `"line\nforged"`, "\x1b[31mred": `"\x1b[31mred"`, "é": "é", "tab\there": `"tab\there"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
	p, cut := preview([]byte("héllo"), 2) // é is two bytes: do not split it
	if string(p) != "h" || !cut {
		t.Errorf("preview = %q %v", p, cut)
	}
}
