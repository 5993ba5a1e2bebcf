package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/idemtype"
)

const reconcileUsage = "idem reconcile [--db URL] --as succeeded|failed|release [--status N] [--header 'Name: value']... [--result FILE] [--force] [--json] SCOPE KEY\n" +
	"       idem reconcile [--db URL] --step NAME --as done|not-done [--result FILE] [--force] [--json] SCOPE KEY"

// maxResultFile bounds --result: a stored result is replayed to every
// retry, so it should be what the operation returned, not a dump.
const maxResultFile = 16 << 20

func init() {
	register(command{
		name:    "reconcile",
		usage:   reconcileUsage,
		summary: "resolve a parked or stale claim (succeeded, failed, release) or one step of a parked run",
		run:     runReconcile,
	})
}

func runReconcile(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("reconcile", reconcileUsage, stderr)
	setUsage(fs, reconcileUsage, `
Applies an operator's decision to a claim whose outcome idem does not know:
a parked record, or an in-progress one whose lease has ended. Find out
downstream (by the key, which idem forwarded) what happened, then:

  --as succeeded   it happened: store --status and --result; retries replay them
  --as failed      it ran and failed for good: stored and replayed likewise
  --as release     it certainly did not happen: the next claim runs it again

For a record made by the HTTP layer (idem serve, idemhttp: its fingerprint
starts http-sha256:) every retry is answered with what is stored, so
--status is required (the upstream's, such as 201), --header adds response
headers, and a --result body needs --header 'Content-Type: …'. Other
records take no headers.

A record in progress under a live lease is refused (exit 1): its holder may
still be working. --force resolves it anyway and fences the holder out (its
own completion fails with a lost lease); use it only when you know the
holder is gone. Completed records are never changed.

A multi-step run (docs/steps.md) parks when a started external step's
outcome is unknown. Resolve that step instead of the whole run with --step
NAME (idem keys show lists a run's steps and their step keys):

  --step NAME --as done --result FILE   the call happened: FILE (JSON, at
                                        most 64 KiB) is checkpointed as the
                                        step's result; the run goes on
                                        without calling it again
  --step NAME --as not-done             it did not happen: the step is
                                        called again with the same step key

The run is then handed back (in progress, lease ended): the next retry of
the same request, or a completer for a registered run, resumes it from its
checkpoints.

  idem keys list --state parked
  idem reconcile acct-1 order-42 --as succeeded --status 201 --header 'Content-Type: application/json' --result charge.json
  idem reconcile "" nightly-2030-01-02 --as release`)
	db := fs.String("db", "", dbFlagHelp)
	as := fs.String("as", "", "the decision: succeeded, failed or release (required)")
	resultFile := fs.String("result", "", "store the contents of `FILE` (- for stdin, at most 16 MiB) as the result body")
	status := fs.Int("status", 0, "store status `N` with the result (required for HTTP records: give the upstream's status)")
	var headers stringList
	fs.Var(&headers, "header", "store response header `'Name: value'` with an HTTP record's result (repeatable; Content-Type is needed with a body)")
	step := fs.String("step", "", "resolve the started step called `NAME` of a parked or stale multi-step run (--as done|not-done)")
	force := fs.Bool("force", false, "resolve even under a live lease, fencing its holder out")
	asJSON := fs.Bool("json", false, "print the resolved record as JSON")
	logf := addLogFlags(fs, "info")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) != 2 {
		return usageError(fs, stderr, "want SCOPE and KEY (an empty scope is \"\"), got %d arguments", len(pos))
	}
	if *step != "" {
		return reconcileStep(ctx, fs, stepDecision{db: *db, step: *step, as: *as, resultFile: *resultFile, force: *force, asJSON: *asJSON,
			status: *status, headers: len(headers), logf: logf, scope: pos[0], key: pos[1]}, stdin, stdout, stderr)
	}
	var st idemtype.State
	switch *as {
	case "succeeded", "success", "done":
		st = idemtype.StateSucceeded
	case "failed", "fail":
		st = idemtype.StateFailed
	case "release", "released", "not_done":
		st = idemtype.StateReleased
	case "":
		return usageError(fs, stderr, "--as is required: succeeded, failed or release")
	default:
		return usageError(fs, stderr, "--as %q: want succeeded, failed or release", *as)
	}
	if st == idemtype.StateReleased && (*resultFile != "" || *status != 0 || len(headers) > 0) {
		return usageError(fs, stderr, "--as release stores no result; drop --result, --status and --header")
	}
	if *status < 0 || *status > 999 {
		return usageError(fs, stderr, "--status %d: want 0…999", *status)
	}
	var header http.Header
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return usageError(fs, stderr, "--header %q: want 'Name: value'", h)
		}
		if header == nil {
			header = http.Header{}
		}
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	log, err := logf.logger(stderr)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	var body []byte
	if *resultFile != "" {
		body, err = readResult(*resultFile, stdin)
		if err != nil {
			return usageError(fs, stderr, "%v", err)
		}
	}

	l, err := openLedger(ctx, *db, &idem.Options{Logger: log, HashKeysInLogs: logf.hashKeys})
	if err != nil {
		return openFailed(stderr, "reconcile", err)
	}
	defer l.Close()
	scope, key := pos[0], pos[1]
	// The record decides what a result needs (admin.Settlement: the page
	// and this command share the rules); Resolve checks its state again.
	rec, err := l.Get(ctx, scope, key)
	if err == nil && (rec.State == idemtype.StateParked || rec.State == idemtype.StateInProgress) {
		var res idem.Resolution
		res, err = admin.Settlement{As: st, Status: *status, Header: header, Body: body, Force: *force}.Resolution(rec)
		if err != nil {
			fmt.Fprintf(stderr, "idem reconcile: refused: scope %s key %s: %v\n", printable(scope), printable(key), err)
			return 1
		}
		rec, err = l.Resolve(ctx, scope, key, res)
	} else if err == nil {
		err = errors.New("completed") // refused below, by its state
	}
	switch {
	case errors.Is(err, idem.ErrNotFound):
		fmt.Fprintf(stderr, "idem reconcile: no record for scope %s key %s\n", printable(scope), printable(key))
		return 1
	case errors.Is(err, idem.ErrLiveLease):
		fmt.Fprintf(stderr, "idem reconcile: refused: scope %s key %s is in progress under a live lease until %s (%s, attempt %d); its holder may still be working. Wait for the lease to end, or pass --force if you know the holder is gone.\n",
			printable(scope), printable(key), timeText(rec.LeaseUntil), ago(rec.LeaseUntil, rec.Now), rec.Attempt)
		return 1
	case err != nil && rec.State != "":
		fmt.Fprintf(stderr, "idem reconcile: refused: scope %s key %s is %s, not parked or in progress; only unknown outcomes are reconciled\n",
			printable(scope), printable(key), rec.State)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "idem reconcile:", err)
		return 1
	}
	logKey := key
	if logf.hashKeys {
		logKey = idem.KeyHash(key)
	}
	log.InfoContext(ctx, "operator resolved a claim", "scope", scope, "key", logKey, "fingerprint", rec.Fingerprint,
		"attempt", rec.Attempt, "as", string(st), "status", *status, "body_bytes", len(body), "force", *force)
	if *asJSON {
		err = writeJSON(stdout, toJSON(rec, true, 512))
	} else {
		fmt.Fprintf(stdout, "resolved scope %s key %s as %s\n\n", printable(scope), printable(key), st)
		err = printRecord(stdout, rec, 512)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem reconcile:", err)
		return 1
	}
	return 0
}

// readResult reads the --result file (or stdin for "-"), refusing more
// than maxResultFile bytes.
func readResult(name string, stdin io.Reader) ([]byte, error) {
	in := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--result: %w", err)
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxResultFile+1))
	if err != nil {
		return nil, fmt.Errorf("--result %s: %w", name, err)
	}
	if len(b) > maxResultFile {
		return nil, fmt.Errorf("--result %s: larger than %d MiB", name, maxResultFile>>20)
	}
	return b, nil
}

// stepDecision is what reconcile --step was asked.
type stepDecision struct {
	db, step, as, resultFile string
	force, asJSON            bool
	status, headers          int
	logf                     *logFlags
	scope, key               string
}

// reconcileStep resolves one started step of a parked or stale run
// (Ledger.ResolveStep) and hands the run back to its next retry or
// completer.
func reconcileStep(ctx context.Context, fs *flag.FlagSet, d stepDecision, stdin io.Reader, stdout, stderr io.Writer) int {
	var v idem.Verdict
	switch d.as {
	case "done":
		v = idem.VerdictDone
	case "not-done", "not_done":
		v = idem.VerdictNotDone
	case "":
		return usageError(fs, stderr, "--as is required with --step: done or not-done")
	default:
		return usageError(fs, stderr, "--as %q with --step: want done or not-done", d.as)
	}
	if d.status != 0 || d.headers > 0 {
		return usageError(fs, stderr, "--step stores a step's JSON result only; drop --status and --header")
	}
	if v == idem.VerdictDone && d.resultFile == "" {
		return usageError(fs, stderr, "--step %s --as done needs --result FILE: the step's result as JSON", d.step)
	}
	if v == idem.VerdictNotDone && d.resultFile != "" {
		return usageError(fs, stderr, "--as not-done stores no result; drop --result")
	}
	log, err := d.logf.logger(stderr)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	var result []byte
	if d.resultFile != "" {
		if result, err = readResult(d.resultFile, stdin); err != nil {
			return usageError(fs, stderr, "%v", err)
		}
	}
	l, err := openLedger(ctx, d.db, &idem.Options{Logger: log, HashKeysInLogs: d.logf.hashKeys})
	if err != nil {
		return openFailed(stderr, "reconcile", err)
	}
	defer l.Close()
	scope, key := d.scope, d.key
	rec, err := l.ResolveStep(ctx, scope, key, idem.StepResolution{Step: d.step, As: v, Result: result, Force: d.force})
	switch {
	case errors.Is(err, idem.ErrNotFound):
		fmt.Fprintf(stderr, "idem reconcile: no record for scope %s key %s\n", printable(scope), printable(key))
		return 1
	case errors.Is(err, idem.ErrStepNotFound):
		fmt.Fprintf(stderr, "idem reconcile: refused: scope %s key %s has no step %s (idem keys show lists a run's steps)\n",
			printable(scope), printable(key), printable(d.step))
		return 1
	case errors.Is(err, idem.ErrLiveLease):
		fmt.Fprintf(stderr, "idem reconcile: refused: scope %s key %s is in progress under a live lease until %s (%s, attempt %d); its holder may still be working. Wait for the lease to end, or pass --force if you know the holder is gone.\n",
			printable(scope), printable(key), timeText(rec.LeaseUntil), ago(rec.LeaseUntil, rec.Now), rec.Attempt)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "idem reconcile: refused:", err)
		return 1
	}
	logKey := key
	if d.logf.hashKeys {
		logKey = idem.KeyHash(key)
	}
	log.InfoContext(ctx, "operator resolved a step", "scope", scope, "key", logKey, "fingerprint", rec.Fingerprint,
		"attempt", rec.Attempt, "step", d.step, "as", v.String(), "result_bytes", len(result), "force", d.force)
	steps, err := l.RunSteps(ctx, scope, key)
	if err != nil {
		fmt.Fprintln(stderr, "idem reconcile:", err)
		return 1
	}
	if d.asJSON {
		out := toJSON(rec, true, 512)
		out.Run, out.Steps = stepsJSON(rec, steps)
		err = writeJSON(stdout, out)
	} else {
		fmt.Fprintf(stdout, "resolved step %s of scope %s key %s as %s; the next retry or completer resumes the run\n\n",
			printable(d.step), printable(scope), printable(key), strings.ReplaceAll(v.String(), "_", "-"))
		if err = printRecord(stdout, rec, 512); err == nil {
			err = printSteps(stdout, rec, steps)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem reconcile:", err)
		return 1
	}
	return 0
}
