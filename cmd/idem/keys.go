package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

const (
	keysUsage     = "idem keys <list|show> [flags]"
	keysListUsage = "idem keys list [--db URL] [--state STATE] [--stale] [--scope S] [--key K] [--limit N] [--wide] [--json]"
	keysShowUsage = "idem keys show [--db URL] [--preview N] [--json] SCOPE KEY"
)

func init() {
	register(command{
		name:    "keys",
		usage:   keysUsage,
		summary: "list the ledger's records, or show one with its stored result",
		run:     runKeys,
	})
}

func keysHelp(w io.Writer) {
	fmt.Fprintf(w, `Usage: %s

Read the ledger's records. Nothing is written.

Subcommands:
  list   records, most recently updated first, filtered by state, scope or staleness
  show   one record: fingerprint, attempt, lease, retention and a preview of its result

Run 'idem keys <subcommand> --help' for its flags.
%s`, keysUsage, exitCodes)
}

func runKeys(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runGroup(ctx, "keys", keysHelp, []subcommand{
		{[]string{"list", "ls"}, runKeysList},
		{[]string{"show", "get"}, runKeysShow},
	}, args, stdout, stderr)
}

var listStates = []idemtype.State{idemtype.StateInProgress, idemtype.StateSucceeded, idemtype.StateFailed, idemtype.StateParked, idemtype.StateTombstone, idemtype.StateReleased}

func runKeysList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("keys list", keysListUsage, stderr)
	setUsage(fs, keysListUsage, `
Lists records, most recently updated first. NOTE says where each is in its
life by the database clock: when its lease ends, whether it is stale, how
long it is replayed. Scopes and keys that are empty or hold unprintable
characters are printed Go-quoted.

  idem keys list --state parked            everything waiting for idem reconcile
  idem keys list --stale                   in progress past its lease (holder gone?)
  idem keys list --scope acct-1 --json     one tenant's records, for scripts
  idem keys list --key order-42            that key in every scope

Scopes longer than 32 characters (the gateway's keyed hashes are 83) are
shortened in the table: authorization-hmac:3f9a1c0b2d4e…; --wide or
--json shows them whole. --key without --scope searches the newest
100000 records; with --scope it reads the one record.`)
	db := fs.String("db", "", dbFlagHelp)
	state := fs.String("state", "", "only records in `STATE`: in_progress, succeeded, failed, parked, tombstone or released")
	stale := fs.Bool("stale", false, "only in-progress records whose lease has ended")
	scope := fs.String("scope", "", "only records in scope `S`")
	key := fs.String("key", "", "only records of key `K` (in every scope, or in --scope)")
	wide := fs.Bool("wide", false, "print scopes whole in the table")
	limit := fs.Int("limit", 100, "at most `N` records (1…100000)")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	st := idemtype.State(*state)
	if st != "" && !validState(st) {
		return usageError(fs, stderr, "--state %q: want one of %s", *state, statesText())
	}
	if *stale && st != "" && st != idemtype.StateInProgress {
		return usageError(fs, stderr, "--stale selects in-progress records; it cannot be combined with --state %s", st)
	}
	if *limit < 1 || *limit > 100000 {
		return usageError(fs, stderr, "--limit %d: want 1…100000", *limit)
	}
	l, err := openLedger(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "keys list", err)
	}
	defer l.Close()
	recs, err := l.List(ctx, idemtype.ListFilter{State: st, Stale: *stale, Scope: *scope, Key: *key, Limit: *limit})
	if err != nil {
		fmt.Fprintln(stderr, "idem keys list:", err)
		return 1
	}
	if *asJSON {
		out := make([]recordJSON, len(recs))
		for i, r := range recs {
			out[i] = toJSON(r, false, 0)
		}
		if err := writeJSON(stdout, out); err != nil {
			fmt.Fprintln(stderr, "idem keys list:", err)
			return 1
		}
	} else {
		t := newTable(stdout, "SCOPE", "KEY", "STATE", "ATTEMPT", "UPDATED", "NOTE")
		for _, r := range recs {
			sc := printable(r.Scope)
			if !*wide {
				sc = shortScope(sc)
			}
			t.row(sc, printable(r.Key), string(r.State), fmt.Sprint(r.Attempt), timeText(r.UpdatedAt), recordNote(r))
		}
		if err := t.flush(); err != nil {
			fmt.Fprintln(stderr, "idem keys list:", err)
			return 1
		}
	}
	if len(recs) == *limit {
		fmt.Fprintf(stderr, "idem keys list: showing the first %d; there may be more (--limit)\n", *limit)
	}
	return 0
}

func runKeysShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("keys show", keysShowUsage, stderr)
	setUsage(fs, keysShowUsage, `
Shows one record: state, fingerprint, attempt (the fencing token), lease,
retention and tombstone times by the database clock, the key's log hash,
and a preview of the stored result. The preview is cut to --preview bytes
and printed Go-quoted when it holds unprintable characters; with --json it
is text when UTF-8 and base64 otherwise. An unfinished multi-step run
also lists its steps: name, state, attempt, result size and step key.
An empty scope is "".

  idem keys show "" order-42
  idem keys show acct-1 -- -key-with-a-dash`)
	db := fs.String("db", "", dbFlagHelp)
	previewN := fs.Int("preview", 512, "show at most `N` bytes of the stored body and metadata")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) != 2 {
		return usageError(fs, stderr, "want SCOPE and KEY (an empty scope is \"\"), got %d arguments", len(pos))
	}
	if *previewN < 0 {
		return usageError(fs, stderr, "--preview %d: want 0 or more", *previewN)
	}
	l, err := openLedger(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "keys show", err)
	}
	defer l.Close()
	r, err := l.Get(ctx, pos[0], pos[1])
	if errors.Is(err, idem.ErrNotFound) {
		fmt.Fprintf(stderr, "idem keys show: no record for scope %s key %s\n", printable(pos[0]), printable(pos[1]))
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem keys show:", err)
		return 1
	}
	steps, err := l.RunSteps(ctx, pos[0], pos[1])
	if err != nil {
		fmt.Fprintln(stderr, "idem keys show:", err)
		return 1
	}
	if *asJSON {
		out := toJSON(r, true, *previewN)
		out.Run, out.Steps = stepsJSON(r, steps)
		err = writeJSON(stdout, out)
	} else if err = printRecord(stdout, r, *previewN); err == nil {
		err = printSteps(stdout, r, steps)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem keys show:", err)
		return 1
	}
	return 0
}

// shortScope shortens a long scope for the table: the gateway's scopes are
// "name:" and 64 hex digits, shown as the name and 12 digits. The cut is
// marked with "…", which no printed scope otherwise ends with unquoted.
func shortScope(s string) string {
	const max, keep = 32, 12
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	if i := strings.IndexByte(s, ':'); i > 0 && i < max {
		return s[:i+1] + firstRunes(s[i+1:], keep) + "…"
	}
	return firstRunes(s, max-8) + "…"
}

// firstRunes returns the first n runes of s.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

func validState(s idemtype.State) bool {
	for _, v := range listStates {
		if s == v {
			return true
		}
	}
	return false
}

func statesText() string {
	names := make([]string, len(listStates))
	for i, s := range listStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
