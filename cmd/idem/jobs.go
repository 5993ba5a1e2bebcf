package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

const (
	jobsUsage        = "idem jobs <list|show|retry|discard|cancel|pause|resume|queues> [flags]"
	jobsListUsage    = "idem jobs list [--db URL] [--queue Q] [--state STATE] [--kind K] [--after ID] [--limit N] [--json]"
	jobsShowUsage    = "idem jobs show [--db URL] [--preview N] [--json] ID"
	jobsRetryUsage   = "idem jobs retry [--db URL] [--attempts N] [--json] ID"
	jobsDiscardUsage = "idem jobs discard [--db URL] [--force] ID"
	jobsCancelUsage  = "idem jobs cancel [--db URL] [--json] ID"
)

func init() {
	register(command{
		name:    "jobs",
		usage:   jobsUsage,
		summary: "list and show jobs; retry or discard dead ones; cancel waiting or running ones; pause and resume queues",
		run:     runJobs,
	})
}

func jobsHelp(w io.Writer) {
	fmt.Fprintf(w, `Usage: %s

Inspect the job queue (package jobs) in the ledger's database, and act on
dead letters and on jobs that must not run. list and show write nothing.

Subcommands:
  list      jobs in id order, filtered by queue, state or kind
  show      one job: its arguments, every failed attempt, its result
  retry     make a dead job available now, with more attempts
  discard   delete a dead job (--force: a job in any state)
  cancel    cancel an available or running job: it never runs, or completes
  pause     stop every worker, on every host, claiming a queue's jobs
  resume    let workers claim a paused queue's jobs again
  queues    every queue: paused or running, and its jobs by state

Run 'idem jobs <subcommand> --help' for its flags.
%s`, jobsUsage, exitCodes)
}

func runJobs(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runGroup(ctx, "jobs", jobsHelp, []subcommand{
		{[]string{"list", "ls"}, runJobsList},
		{[]string{"show", "get"}, runJobsShow},
		{[]string{"retry", "requeue"}, runJobsRetry},
		{[]string{"discard", "rm"}, runJobsDiscard},
		{[]string{"cancel"}, runJobsCancel},
		{[]string{"pause"}, runJobsPause},
		{[]string{"resume"}, runJobsResume},
		{[]string{"queues"}, runJobsQueues},
	}, args, stdout, stderr)
}

var jobStates = idemtype.JobStates

// parseJobState checks a --state value; empty means every state.
func parseJobState(s string) (idemtype.JobState, bool) {
	for _, v := range jobStates {
		if idemtype.JobState(s) == v {
			return v, true
		}
	}
	return "", s == ""
}

func jobStatesText() string {
	names := make([]string, len(jobStates))
	for i, s := range jobStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// jobPage is the filter and paging flags that jobs list and outbox list
// share.
type jobPage struct {
	state   string
	after   int64
	limit   int
	problem string
}

// addJobPage defines --state, --after and --limit on fs; what names the
// listed things ("jobs"), cursor the --after placeholder.
func addJobPage(fs *flag.FlagSet, what, cursor string) *jobPage {
	p := &jobPage{}
	fs.StringVar(&p.state, "state", "", "only "+what+" in `STATE`: "+jobStatesText())
	fs.Int64Var(&p.after, "after", 0, "only "+what+" whose job id is above `"+cursor+"` (the next page)")
	fs.IntVar(&p.limit, "limit", 100, "at most `N` "+what+" (1…100000)")
	return p
}

// check validates the flags; problem says what is wrong when ok is false.
func (p *jobPage) check() (st idemtype.JobState, ok bool) {
	st, ok = parseJobState(p.state)
	switch {
	case !ok:
		p.problem = fmt.Sprintf("--state %q: want one of %s", p.state, jobStatesText())
	case p.limit < 1 || p.limit > 100000:
		p.problem, ok = fmt.Sprintf("--limit %d: want 1…100000", p.limit), false
	case p.after < 0:
		p.problem, ok = fmt.Sprintf("--after %d: want 0 or more", p.after), false
	}
	return st, ok
}

// parseJobID reads the ID argument of show, retry and discard.
func parseJobID(pos []string) (int64, error) {
	if len(pos) != 1 {
		return 0, fmt.Errorf("want one job ID, got %d arguments", len(pos))
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("job ID %q: want a positive integer", pos[0])
	}
	return id, nil
}

// openJobs opens the ledger (never creating it) and a jobs client on it
// that is never started: it reads and acts on rows, and runs no job.
func openJobs(ctx context.Context, db string, cfg *jobs.Config) (*idem.Ledger, *jobs.Client, error) {
	l, err := openLedger(ctx, db, nil)
	if err != nil {
		return nil, nil, err
	}
	var c jobs.Config
	if cfg != nil {
		c = *cfg
	}
	c.Logger = slog.New(slog.DiscardHandler)
	jc, err := jobs.New(l, &c)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, jc, nil
}

// jobsErr adds a hint to an error from a database without the jobs tables.
func jobsErr(err error) error {
	s := err.Error()
	if strings.Contains(s, "idem_jobs") && (strings.Contains(s, "no such table") || strings.Contains(s, "does not exist")) {
		return fmt.Errorf("%w (this database has no jobs tables: run idem migrate)", err)
	}
	return err
}

func runJobsList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs list", jobsListUsage, stderr)
	setUsage(fs, jobsListUsage, `
Lists jobs in id order (oldest first), with where each is in its life:
when an available job runs, whose lease a running job holds, when a job
completed or died and its last error. Times are by this host's clock. Page
with --after the last ID shown.

  idem jobs list --state dead                  the dead letters
  idem jobs list --queue email --state running
  idem jobs list --state dead --json | jq '.[].id'`)
	db := fs.String("db", "", dbFlagHelp)
	queue := fs.String("queue", "", "only jobs of queue `Q`")
	kind := fs.String("kind", "", "only jobs of kind `K`")
	pg := addJobPage(fs, "jobs", "ID")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	st, ok := pg.check()
	if !ok {
		return usageError(fs, stderr, "%s", pg.problem)
	}
	after, limit := &pg.after, &pg.limit
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs list", err)
	}
	defer l.Close()
	recs, err := c.List(ctx, &jobs.ListParams{Queue: *queue, State: st, Kind: *kind, AfterID: *after, Limit: *limit})
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs list:", jobsErr(err))
		return 1
	}
	now := time.Now()
	if *asJSON {
		out := make([]jobJSON, len(recs))
		for i, r := range recs {
			out[i] = toJobJSON(r, false, 0)
		}
		err = writeJSON(stdout, out)
	} else {
		paused := pausedQueues(ctx, c)
		t := newTable(stdout, "ID", "QUEUE", "KIND", "STATE", "ATTEMPT", "KEY", "NOTE")
		for _, r := range recs {
			key := "-"
			if r.UniqueKey != "" {
				key = printable(r.UniqueKey)
			}
			note := jobNote(r, now, 80)
			if paused[r.Queue] && r.State == idemtype.JobAvailable {
				note = "queue paused; " + note
			}
			t.row(strconv.FormatInt(r.ID, 10), r.Queue, printable(r.Kind), string(r.State),
				fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts), key, note)
		}
		err = t.flush()
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs list:", err)
		return 1
	}
	if len(recs) == *limit {
		fmt.Fprintf(stderr, "idem jobs list: showing %d; there may be more (--after %d)\n", *limit, recs[len(recs)-1].ID)
	}
	return 0
}

func runJobsShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs show", jobsShowUsage, stderr)
	setUsage(fs, jobsShowUsage, `
Shows one job: queue, kind, state, attempts, unique key, worker and lease,
every failed attempt's error, and previews of its arguments and result
(cut to --preview bytes; with --json, text when UTF-8 and base64
otherwise).

  idem jobs show 42
  idem jobs show 42 --json | jq .errors`)
	db := fs.String("db", "", dbFlagHelp)
	previewN := fs.Int("preview", 512, "show at most `N` bytes of the arguments and the result")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	id, err := parseJobID(pos)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *previewN < 0 {
		return usageError(fs, stderr, "--preview %d: want 0 or more", *previewN)
	}
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs show", err)
	}
	defer l.Close()
	r, err := c.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		fmt.Fprintf(stderr, "idem jobs show: no job %d (never enqueued, discarded, or pruned after completing)\n", id)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs show:", jobsErr(err))
		return 1
	}
	if *asJSON {
		err = writeJSON(stdout, toJobJSON(r, true, *previewN))
	} else {
		err = printJob(stdout, r, *previewN)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs show:", err)
		return 1
	}
	return 0
}

func runJobsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs retry", jobsRetryUsage, stderr)
	setUsage(fs, jobsRetryUsage, `
Makes a dead job available now, with --attempts more attempts; the next
worker on its queue runs it. Its errors are kept. Only dead jobs are
retried: a job that is available or running is on its way already (exit
1). Fix whatever killed it first, or it dies again.

  idem jobs list --state dead
  idem jobs retry 42
  idem jobs retry 42 --attempts 1     one more try, no retries`)
	db := fs.String("db", "", dbFlagHelp)
	attempts := fs.Int("attempts", jobs.DefaultMaxAttempts, fmt.Sprintf("give the job `N` more attempts (1…%d)", jobs.MaxAttemptLimit))
	asJSON := fs.Bool("json", false, "print the requeued job as JSON")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	id, err := parseJobID(pos)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *attempts < 1 || *attempts > jobs.MaxAttemptLimit {
		return usageError(fs, stderr, "--attempts %d: want 1…%d", *attempts, jobs.MaxAttemptLimit)
	}
	l, c, err := openJobs(ctx, *db, &jobs.Config{MaxAttempts: *attempts})
	if err != nil {
		return openFailed(stderr, "jobs retry", err)
	}
	defer l.Close()
	r, err := c.Requeue(ctx, id)
	if err != nil {
		return jobActionErr(ctx, c, "retry", "retried", id, err, stderr)
	}
	if *asJSON {
		err = writeJSON(stdout, toJobJSON(r, false, 0))
	} else {
		_, err = fmt.Fprintf(stdout, "requeued job %d (queue %s, kind %s): available now, attempt %d of %d next\n",
			r.ID, r.Queue, printable(r.Kind), r.Attempt+1, r.MaxAttempts)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs retry:", err)
		return 1
	}
	return 0
}

func runJobsDiscard(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs discard", jobsDiscardUsage, stderr)
	setUsage(fs, jobsDiscardUsage, `
Deletes a dead job: the decision that it will never run. Its unique key is
freed, so the same job can be enqueued again. Jobs in other states are
refused (exit 1) unless --force: then an available job is deleted before
it runs, a completed one loses its result, and a running one's worker
finds its lease gone (its completion writes nothing; effects it made
outside its CompleteTx transaction stay made).

  idem jobs discard 42
  idem jobs discard 43 --force      an available job that must not run`)
	db := fs.String("db", "", dbFlagHelp)
	force := fs.Bool("force", false, "delete the job whatever its state")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	id, err := parseJobID(pos)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs discard", err)
	}
	defer l.Close()
	r, err := c.Get(ctx, id)
	if err == nil {
		if *force {
			err = c.Delete(ctx, id)
		} else {
			err = c.Discard(ctx, id)
		}
	}
	if err != nil {
		return jobActionErr(ctx, c, "discard", "discarded without --force", id, err, stderr)
	}
	fmt.Fprintf(stdout, "discarded job %d (queue %s, kind %s, was %s)\n", r.ID, r.Queue, printable(r.Kind), r.State)
	return 0
}

func runJobsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs cancel", jobsCancelUsage, stderr)
	setUsage(fs, jobsCancelUsage, `
Cancels a job. An available job (due, scheduled or waiting for a retry)
never runs. A running job's completion is refused from now on, so what its
handler commits with CompleteTx rolls back, and it is never retried; its
worker's context is cancelled at its next heartbeat. What the handler
already did outside that transaction (a call to another service) stays
done. A job that completed or died first is refused (exit 1); a job
already cancelled is left as it is. Cancelled jobs keep their unique key
until pruned with completed ones.

  idem jobs cancel 42
  idem jobs list --state cancelled`)
	db := fs.String("db", "", dbFlagHelp)
	asJSON := fs.Bool("json", false, "print the cancelled job as JSON")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	id, err := parseJobID(pos)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs cancel", err)
	}
	defer l.Close()
	before, err := c.Get(ctx, id)
	var r *idemtype.JobRow
	if err == nil {
		r, err = c.Cancel(ctx, id)
	}
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		fmt.Fprintf(stderr, "idem jobs cancel: no job %d\n", id)
		return 1
	case errors.Is(err, jobs.ErrWrongState):
		state := "finished"
		if r, gerr := c.Get(ctx, id); gerr == nil {
			state = string(r.State)
		}
		fmt.Fprintf(stderr, "idem jobs cancel: refused: job %d is %s; only available and running jobs are cancelled\n", id, state)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "idem jobs cancel:", jobsErr(err))
		return 1
	}
	if *asJSON {
		err = writeJSON(stdout, toJobJSON(r, false, 0))
	} else {
		was := "was " + string(before.State)
		if before.State == idemtype.JobCancelled {
			was = "already cancelled"
		}
		_, err = fmt.Fprintf(stdout, "cancelled job %d (queue %s, kind %s, %s)\n", r.ID, r.Queue, printable(r.Kind), was)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs cancel:", err)
		return 1
	}
	return 0
}

// jobActionErr reports a failed retry or discard and returns its exit code.
func jobActionErr(ctx context.Context, c *jobs.Client, verb, done string, id int64, err error, stderr io.Writer) int {
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		fmt.Fprintf(stderr, "idem jobs %s: no job %d\n", verb, id)
	case errors.Is(err, jobs.ErrWrongState):
		state := "not dead"
		if r, gerr := c.Get(ctx, id); gerr == nil {
			state = string(r.State) + ", not dead"
		}
		fmt.Fprintf(stderr, "idem jobs %s: refused: job %d is %s; only dead jobs are %s\n", verb, id, state, done)
	default:
		fmt.Fprintf(stderr, "idem jobs %s: %v\n", verb, jobsErr(err))
	}
	return 1
}

// past says how long ago t was, in words: "3m10s ago", "just now" (also
// for a t slightly ahead of this host's clock).
func past(t, now time.Time) string {
	if d := now.Sub(t).Round(time.Second); d > 0 {
		return d.String() + " ago"
	}
	return "just now"
}

// jobNote is the table's one-line summary of where a job is in its life,
// cut to about n bytes.
func jobNote(r *idemtype.JobRow, now time.Time, n int) string {
	var s string
	switch r.State {
	case idemtype.JobAvailable:
		if r.RunAt.After(now) {
			s = "runs " + ago(r.RunAt, now)
		} else {
			s = "due " + past(r.RunAt, now)
		}
		if len(r.Errors) > 0 {
			s += "; last error: " + r.Errors[len(r.Errors)-1].Error
		}
	case idemtype.JobRunning:
		if r.LeaseUntil.After(now) {
			s = "held by " + r.ClaimedBy + ", lease ends " + ago(r.LeaseUntil, now)
		} else {
			s = "lease ended " + past(r.LeaseUntil, now) + ": the next claim on its queue takes it back"
		}
	case idemtype.JobCompleted:
		s = "completed " + past(r.FinalizedAt, now)
	case idemtype.JobCancelled:
		s = "cancelled " + past(r.FinalizedAt, now)
	case idemtype.JobDead:
		s = "died " + past(r.FinalizedAt, now)
		if len(r.Errors) > 0 {
			s += ": " + r.Errors[len(r.Errors)-1].Error
		}
	}
	if p, cut := preview([]byte(s), n); cut {
		s = string(p) + "…"
	}
	return printable(s)
}

// jobJSON is a job as the jobs commands print it with --json. Times are
// RFC 3339 in UTC; absent times are omitted.
type jobJSON struct {
	ID          int64             `json:"id"`
	Queue       string            `json:"queue"`
	Kind        string            `json:"kind"`
	State       idemtype.JobState `json:"state"`
	Priority    int               `json:"priority"`
	Attempt     int               `json:"attempt"`
	MaxAttempts int               `json:"max_attempts"`
	UniqueKey   string            `json:"unique_key,omitempty"`
	Worker      string            `json:"worker,omitempty"`
	RunAt       *time.Time        `json:"run_at,omitempty"`
	LeaseUntil  *time.Time        `json:"lease_until,omitempty"`
	CreatedAt   *time.Time        `json:"created_at,omitempty"`
	AttemptedAt *time.Time        `json:"attempted_at,omitempty"`
	FinalizedAt *time.Time        `json:"finalized_at,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	Errors      []jobErrorJSON    `json:"errors,omitempty"`
	Args        *blobJSON         `json:"args,omitempty"`
	Result      *blobJSON         `json:"result,omitempty"`
	// Metadata is the job's metadata object (EnqueueOpts.Metadata).
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	PartitionKey string          `json:"partition_key,omitempty"`
}

type jobErrorJSON struct {
	Attempt int        `json:"attempt"`
	At      *time.Time `json:"at,omitempty"`
	Error   string     `json:"error"`
}

// blobJSON previews stored bytes: text when UTF-8, base64 otherwise.
type blobJSON struct {
	Bytes     int    `json:"bytes"`
	Data      string `json:"data,omitempty"`
	Encoding  string `json:"encoding,omitempty"` // "utf-8" or "base64"
	Truncated bool   `json:"truncated,omitempty"`
}

func toBlobJSON(b []byte, n int) *blobJSON {
	out := &blobJSON{Bytes: len(b)}
	out.Data, out.Encoding, out.Truncated = encodePreview(b, n)
	return out
}

// toJobJSON converts a job; full adds every error and previews of up to
// previewBytes of its arguments and result.
func toJobJSON(r *idemtype.JobRow, full bool, previewBytes int) jobJSON {
	out := jobJSON{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, State: r.State, Priority: r.Priority, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		UniqueKey: r.UniqueKey, Worker: r.ClaimedBy, RunAt: jsonTime(r.RunAt), LeaseUntil: jsonTime(r.LeaseUntil),
		CreatedAt: jsonTime(r.CreatedAt), AttemptedAt: jsonTime(r.AttemptedAt), FinalizedAt: jsonTime(r.FinalizedAt),
		Metadata: jsonObject(r.Metadata), PartitionKey: r.PartitionKey,
	}
	if n := len(r.Errors); n > 0 {
		out.LastError = r.Errors[n-1].Error
	}
	if full {
		for _, e := range r.Errors {
			out.Errors = append(out.Errors, jobErrorJSON{Attempt: e.Attempt, At: jsonTime(e.At), Error: e.Error})
		}
		out.Args = toBlobJSON(r.Args, previewBytes)
		if r.State == idemtype.JobCompleted {
			out.Result = toBlobJSON(r.Result, previewBytes)
		}
	}
	return out
}

// printJob prints one job as "field: value" lines.
func printJob(w io.Writer, r *idemtype.JobRow, previewBytes int) error {
	now := time.Now()
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)}
	t.row("id:", strconv.FormatInt(r.ID, 10))
	t.row("queue:", r.Queue)
	t.row("kind:", printable(r.Kind))
	t.row("state:", string(r.State)+" — "+jobNote(r, now, 200))
	t.row("priority:", strconv.Itoa(r.Priority)+" (1 is the highest)")
	t.row("attempt:", fmt.Sprintf("%d of %d", r.Attempt, r.MaxAttempts))
	if r.UniqueKey != "" {
		t.row("unique key:", printable(r.UniqueKey))
	}
	t.row("run at:", timeText(r.RunAt))
	if r.ClaimedBy != "" {
		t.row("worker:", printable(r.ClaimedBy)+" (the last to claim it)")
	}
	if r.State == idemtype.JobRunning {
		t.row("lease until:", timeText(r.LeaseUntil)+" ("+ago(r.LeaseUntil, now)+")")
	}
	t.row("created:", timeText(r.CreatedAt))
	t.row("attempted:", timeText(r.AttemptedAt))
	if !r.FinalizedAt.IsZero() {
		t.row("finalized:", timeText(r.FinalizedAt))
	}
	t.row("args:", previewText(r.Args, previewBytes))
	if r.Metadata != nil {
		t.row("metadata:", previewText(r.Metadata, previewBytes))
	}
	if r.PartitionKey != "" {
		t.row("partition:", printable(r.PartitionKey))
	}
	if r.State == idemtype.JobCompleted {
		t.row("result:", previewText(r.Result, previewBytes))
	}
	if len(r.Errors) == 0 {
		t.row("errors:", "none")
	}
	for _, e := range r.Errors {
		t.row(fmt.Sprintf("error %d:", e.Attempt), timeText(e.At)+" "+printable(e.Error))
	}
	return t.flush()
}

// jsonObject is stored metadata as JSON to print: as it is when it is
// JSON (it always is when written by jobs), else as a JSON string.
func jsonObject(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}
