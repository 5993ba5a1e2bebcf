package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
)

// Shared by the operator commands (keys, reconcile, prune): opening the
// ledger, flags mixed with arguments, tables and JSON.

// exitCodes is the paragraph every operator command's --help ends with.
const exitCodes = `
Exit codes: 0 success; 1 the command ran and failed (refused, not found,
database error); 2 bad usage or bad input.
`

// setUsage gives fs a usage text: the usage line, a description, the flags
// and the exit codes. It prints to fs.Output(), which parseFlags points at
// stdout for --help and leaves at stderr for mistakes.
func setUsage(fs *flag.FlagSet, usage, about string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", usage, strings.TrimSpace(about))
		fs.PrintDefaults()
		fmt.Fprint(w, exitCodes)
	}
}

// parseArgs parses flags placed before, between or after positional
// arguments (idem reconcile SCOPE KEY --as succeeded), and returns the
// positional ones. Everything after "--" is positional, so a key that
// starts with "-" can be given. done and code are as for parseFlags.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (pos []string, code int, done bool) {
	for {
		if code, done := parseFlags(fs, args, stdout); done {
			return nil, code, true
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, false
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), 0, false
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError prints a usage mistake as one line that points at the
// command's help, and returns exit code 2.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	return usagef(stderr, fs.Name(), format, a...)
}

// usagef is usageError for a command known by name ("keys list").
func usagef(stderr io.Writer, name, format string, a ...any) int {
	fmt.Fprintf(stderr, "idem %s: %s (see idem %s --help)\n", name, fmt.Sprintf(format, a...), name)
	return 2
}

// openLedger opens the ledger at the --db value db for an operator
// command. It does not create a database or apply the schema: a mistyped
// --db must fail, not leave an empty SQLite file behind.
func openLedger(ctx context.Context, db string, opts *idem.Options) (*idem.Ledger, error) {
	open, u, err := openURL(db)
	if err != nil {
		return nil, err
	}
	if u.Driver == dburl.SQLite {
		if _, err := os.Stat(u.Path); err != nil {
			return nil, fmt.Errorf("no database at %s (%v); check --db or $IDEM_DB, or create it with idem migrate", u.Path, errors.Unwrap(err))
		}
	}
	var o idem.Options
	if opts != nil {
		o = *opts
	}
	o.NoMigrate = true
	return dburl.Open(ctx, open, &o)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// printable shows s as it is when every rune is printable and it cannot
// be mistaken for something else, and Go-quoted otherwise: an empty scope
// prints as "", a key with a newline or an escape sequence cannot forge
// table rows or drive the terminal.
func printable(s string) string {
	if s == "" || s != strings.TrimSpace(s) || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}

// preview cuts b to at most n bytes at a rune boundary, and reports
// whether it cut.
func preview(b []byte, n int) ([]byte, bool) {
	if len(b) <= n {
		return b, false
	}
	cut := n
	for cut > 0 && cut > n-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut], true
}

// timeText formats a database time for a table, UTC to the millisecond.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// ago says how far t is from now, in words: "in 25s", "3m10s ago".
func ago(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// recordNote is the table's one-line summary of where a record is in its
// life, by the database clock.
func recordNote(r idemtype.Record) string {
	switch r.State {
	case idemtype.StateInProgress:
		if r.Stale() {
			return "stale: lease ended " + ago(r.LeaseUntil, r.Now)
		}
		return "lease ends " + ago(r.LeaseUntil, r.Now)
	case idemtype.StateSucceeded, idemtype.StateFailed:
		if r.ExpiresAt.After(r.Now) {
			return "replayed until " + timeText(r.ExpiresAt) + " (" + ago(r.ExpiresAt, r.Now) + ")"
		}
		return "retention ended " + ago(r.ExpiresAt, r.Now) + ": prune turns it into a tombstone"
	case idemtype.StateTombstone:
		return "late retries refused until " + timeText(r.TombstoneUntil)
	case idemtype.StateParked:
		return "waits for idem reconcile"
	case idemtype.StateReleased:
		return "free: the next claim runs it"
	}
	return ""
}

// recordJSON is a record as the operator commands print it with --json.
// Times are RFC 3339 in UTC; absent times are omitted.
type recordJSON struct {
	Scope          string         `json:"scope"`
	Key            string         `json:"key"`
	KeyHash        string         `json:"key_hash"`
	Fingerprint    string         `json:"fingerprint"`
	State          idemtype.State `json:"state"`
	Stale          bool           `json:"stale"`
	Attempt        int64          `json:"attempt"`
	LeaseUntil     *time.Time     `json:"lease_until,omitempty"`
	CreatedAt      *time.Time     `json:"created_at,omitempty"`
	UpdatedAt      *time.Time     `json:"updated_at,omitempty"`
	CompletedAt    *time.Time     `json:"completed_at,omitempty"`
	ExpiresAt      *time.Time     `json:"expires_at,omitempty"`
	TombstoneUntil *time.Time     `json:"tombstone_until,omitempty"`
	RetentionMS    int64          `json:"retention_ms"`
	Now            *time.Time     `json:"now,omitempty"`
	Result         *resultJSON    `json:"result,omitempty"`
	// Run and Steps describe an unfinished multi-step run (keys show).
	Run   *runJSON   `json:"run,omitempty"`
	Steps []stepJSON `json:"steps,omitempty"`
}

// runJSON is a registered run's header: its name and input size.
type runJSON struct {
	Name       string `json:"name"`
	InputBytes int    `json:"input_bytes"`
}

// stepJSON is one step of an unfinished run.
type stepJSON struct {
	Index       int                `json:"index"`
	Name        string             `json:"name"`
	State       idemtype.StepState `json:"state"`
	Attempt     int64              `json:"attempt"`
	ResultBytes int                `json:"result_bytes"`
	StepKey     string             `json:"step_key"`
}

func stepsJSON(r idemtype.Record, steps []idemtype.Step) (*runJSON, []stepJSON) {
	var run *runJSON
	var out []stepJSON
	for _, s := range steps {
		if s.Index < 0 {
			run = &runJSON{Name: s.Name, InputBytes: len(s.Result)}
			continue
		}
		out = append(out, stepJSON{Index: s.Index, Name: s.Name, State: s.State, Attempt: s.Attempt,
			ResultBytes: len(s.Result), StepKey: idem.StepKey(r.Scope, r.Key, s.Name)})
	}
	return run, out
}

// printSteps prints an unfinished run's steps under its record, one line
// each: index, name, state, the attempt that wrote it, result size and the
// step key an external step forwards downstream.
func printSteps(w io.Writer, r idemtype.Record, steps []idemtype.Step) error {
	if len(steps) == 0 {
		return nil
	}
	run, list := stepsJSON(r, steps)
	if run != nil {
		fmt.Fprintf(w, "run: %s (input %d bytes)\n", printable(run.Name), run.InputBytes)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tNAME\tSTATE\tATTEMPT\tRESULT\tSTEP KEY")
	for _, s := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d bytes\t%s\n", s.Index, printable(s.Name), s.State, s.Attempt, s.ResultBytes, s.StepKey)
	}
	return tw.Flush()
}

// resultJSON previews a stored result: the body and metadata are cut to
// the preview length, as text when they are UTF-8 and base64 otherwise.
type resultJSON struct {
	Status        int    `json:"status"`
	BodyBytes     int    `json:"body_bytes"`
	Body          string `json:"body,omitempty"`
	BodyEncoding  string `json:"body_encoding,omitempty"` // "utf-8" or "base64"
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	MetaBytes     int    `json:"meta_bytes"`
	Meta          string `json:"meta,omitempty"`
	MetaEncoding  string `json:"meta_encoding,omitempty"`
	MetaTruncated bool   `json:"meta_truncated,omitempty"`
}

func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// encodePreview returns the preview of b as a JSON string and its encoding.
func encodePreview(b []byte, n int) (text, encoding string, cut bool) {
	if len(b) == 0 {
		return "", "", false
	}
	p, cut := preview(b, n)
	if utf8.Valid(p) {
		return string(p), "utf-8", cut
	}
	return base64.StdEncoding.EncodeToString(p), "base64", cut
}

// toJSON converts a record; withResult adds the result preview of up to
// previewBytes of body and metadata.
func toJSON(r idemtype.Record, withResult bool, previewBytes int) recordJSON {
	out := recordJSON{
		Scope: r.Scope, Key: r.Key, KeyHash: idem.KeyHash(r.Key), Fingerprint: r.Fingerprint,
		State: r.State, Stale: r.Stale(), Attempt: r.Attempt,
		LeaseUntil: jsonTime(r.LeaseUntil), CreatedAt: jsonTime(r.CreatedAt), UpdatedAt: jsonTime(r.UpdatedAt),
		CompletedAt: jsonTime(r.CompletedAt), ExpiresAt: jsonTime(r.ExpiresAt), TombstoneUntil: jsonTime(r.TombstoneUntil),
		RetentionMS: r.Retention.Milliseconds(), Now: jsonTime(r.Now),
	}
	if withResult && (r.State == idemtype.StateSucceeded || r.State == idemtype.StateFailed) {
		res := &resultJSON{Status: r.Status, BodyBytes: len(r.Body), MetaBytes: len(r.Meta)}
		res.Body, res.BodyEncoding, res.BodyTruncated = encodePreview(r.Body, previewBytes)
		res.Meta, res.MetaEncoding, res.MetaTruncated = encodePreview(r.Meta, previewBytes)
		out.Result = res
	}
	return out
}

// printRecord prints one record as "field: value" lines, with a preview of
// its stored result.
func printRecord(w io.Writer, r idemtype.Record, previewBytes int) error {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)}
	t.row("scope:", printable(r.Scope))
	t.row("key:", printable(r.Key))
	t.row("key hash:", idem.KeyHash(r.Key)+" (as logged with --hash-keys)")
	t.row("state:", string(r.State)+" — "+recordNote(r))
	t.row("fingerprint:", printable(r.Fingerprint))
	t.row("attempt:", strconv.FormatInt(r.Attempt, 10)+" (the newest fencing token)")
	if r.State == idemtype.StateInProgress {
		t.row("lease until:", timeText(r.LeaseUntil)+" ("+ago(r.LeaseUntil, r.Now)+")")
	}
	t.row("created:", timeText(r.CreatedAt))
	t.row("updated:", timeText(r.UpdatedAt))
	if !r.CompletedAt.IsZero() {
		t.row("completed:", timeText(r.CompletedAt))
		t.row("retention:", r.Retention.String()+", replayed until "+timeText(r.ExpiresAt))
		t.row("tombstone until:", timeText(r.TombstoneUntil))
	}
	t.row("database now:", timeText(r.Now))
	if r.State == idemtype.StateSucceeded || r.State == idemtype.StateFailed {
		res := r
		t.row("result:", fmt.Sprintf("status %d, body %d bytes, meta %d bytes", res.Status, len(res.Body), len(res.Meta)))
		t.row("body:", previewText(res.Body, previewBytes))
		if len(res.Meta) > 0 {
			t.row("meta:", previewText(res.Meta, previewBytes))
		}
	}
	return t.flush()
}

// previewText is a one-line, printable preview of a stored body.
func previewText(b []byte, n int) string {
	if len(b) == 0 {
		return "(empty)"
	}
	p, cut := preview(b, n)
	var s string
	if utf8.Valid(p) {
		s = printable(string(p))
	} else {
		s = "base64:" + base64.StdEncoding.EncodeToString(p)
	}
	if cut {
		s += fmt.Sprintf(" … (%d of %d bytes)", len(p), len(b))
	}
	return s
}
