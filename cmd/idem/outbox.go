package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/outbox"
)

const (
	outboxUsage          = "idem outbox <list|redeliver> [flags]"
	outboxListUsage      = "idem outbox list [--db URL] [--queue Q] [--state STATE] [--after JOB] [--limit N] [--json]"
	outboxRedeliverUsage = "idem outbox redeliver [--db URL] [--queue Q] [--attempts N] [--json] ID"
)

func init() {
	register(command{
		name:    "outbox",
		usage:   outboxUsage,
		summary: "list outbox deliveries; redeliver dead ones",
		run:     runOutbox,
	})
}

func outboxHelp(w io.Writer) {
	fmt.Fprintf(w, `Usage: %s

Inspect the outbox's deliveries (package outbox) in the ledger's database,
and hand dead ones back to the relay. Each delivery is a job on the
outbox's queue; 'idem jobs' shows them too.

Subcommands:
  list        deliveries in the order they were added, filtered by state
  redeliver   make a message's dead deliveries available to the relay again

Run 'idem outbox <subcommand> --help' for its flags.
%s`, outboxUsage, exitCodes)
}

func runOutbox(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runGroup(ctx, "outbox", outboxHelp, []subcommand{
		{[]string{"list", "ls"}, runOutboxList},
		{[]string{"redeliver", "retry"}, runOutboxRedeliver},
	}, args, stdout, stderr)
}

// openOutbox opens the ledger (never creating it) and an outbox on it
// whose relay is never started. An invalid cfg (a bad --queue) is bad
// usage: code 2; anything else is code 1.
func openOutbox(ctx context.Context, db string, cfg outbox.Config) (l *idem.Ledger, ob *outbox.Outbox, code int, err error) {
	l, err = openLedger(ctx, db, nil)
	if err != nil {
		return nil, nil, 1, err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	ob, err = outbox.New(l, &cfg)
	if err != nil {
		l.Close()
		if errors.Is(err, idem.ErrInvalid) {
			return nil, nil, 2, err
		}
		return nil, nil, 1, err
	}
	return l, ob, 0, nil
}

func runOutboxList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("outbox list", outboxListUsage, stderr)
	setUsage(fs, outboxListUsage, `
Lists deliveries (one per message, or one per chunk of a fan-out) in the
order they were added, with their state: available (waiting for the relay
or for a retry), running (being sent), completed (delivered: the
receiver's status) or dead (given up: the last error). Times are by this
host's clock. Page with --after the last JOB shown.

  idem outbox list --state dead
  idem outbox list --state available --json | jq '.[] | {key, next_attempt_at, last_error}'`)
	db := fs.String("db", "", dbFlagHelp)
	queue := fs.String("queue", outbox.DefaultQueue, "the outbox's jobs queue `Q` (outbox.Config.Queue)")
	pg := addJobPage(fs, "deliveries", "JOB")
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
	l, ob, code, err := openOutbox(ctx, *db, outbox.Config{Queue: *queue})
	if err != nil {
		if code == 2 {
			return usagef(stderr, "outbox list", "%v", err)
		}
		return openFailed(stderr, "outbox list", err)
	}
	defer l.Close()
	ds, err := ob.List(ctx, &outbox.ListParams{State: st, AfterJobID: *after, Limit: *limit})
	if err != nil {
		fmt.Fprintln(stderr, "idem outbox list:", jobsErr(err))
		return 1
	}
	if err := printDeliveries(stdout, ds, *asJSON); err != nil {
		fmt.Fprintln(stderr, "idem outbox list:", err)
		return 1
	}
	if len(ds) == *limit {
		fmt.Fprintf(stderr, "idem outbox list: showing %d; there may be more (--after %d)\n", *limit, ds[len(ds)-1].JobID)
	}
	return 0
}

func runOutboxRedeliver(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("outbox redeliver", outboxRedeliverUsage, stderr)
	setUsage(fs, outboxRedeliverUsage, `
Hands the dead deliveries of message ID back to the relay: available now,
with --attempts more attempts, sent with the same Idempotency-Key as
before (a receiver that honours keys applies each once). ID is a message
ID, which redelivers every dead chunk of a fan-out, or one chunk's key
"ID/N". Fix what the receiver refused first, or the delivery dies again.

Deliveries that are not dead are left alone, and if none is dead the
command is refused (exit 1): an available one is retried at its next
attempt time by any running relay; a running one whose relay died is
taken back by another relay after its lease. Neither moves without a
relay running ('idem outbox list --state available').

  idem outbox list --state dead
  idem outbox redeliver order-42-shipped
  idem outbox redeliver campaign-7/3 --attempts 5`)
	db := fs.String("db", "", dbFlagHelp)
	queue := fs.String("queue", outbox.DefaultQueue, "the outbox's jobs queue `Q` (outbox.Config.Queue)")
	attempts := fs.Int("attempts", jobs.DefaultMaxAttempts, fmt.Sprintf("give each delivery `N` more attempts (1…%d)", jobs.MaxAttemptLimit))
	asJSON := fs.Bool("json", false, "print the requeued deliveries as JSON")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, stderr, "want one message ID (or chunk key ID/N), got %d arguments", len(pos))
	}
	if *attempts < 1 || *attempts > jobs.MaxAttemptLimit {
		return usageError(fs, stderr, "--attempts %d: want 1…%d", *attempts, jobs.MaxAttemptLimit)
	}
	id := pos[0]
	l, ob, code, err := openOutbox(ctx, *db, outbox.Config{Queue: *queue, MaxAttempts: *attempts})
	if err != nil {
		if code == 2 {
			return usagef(stderr, "outbox redeliver", "%v", err)
		}
		return openFailed(stderr, "outbox redeliver", err)
	}
	defer l.Close()
	ds, err := ob.Redeliver(ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		fmt.Fprintf(stderr, "idem outbox redeliver: no delivery %s on queue %s (never added, or delivered and pruned)\n", printable(id), *queue)
		return 1
	case errors.Is(err, jobs.ErrWrongState):
		fmt.Fprintf(stderr, "idem outbox redeliver: refused: no delivery of %s is dead; %s\n", printable(id), notDeadText(ctx, ob, id))
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "idem outbox redeliver:", jobsErr(err))
		return 1
	}
	if *asJSON {
		err = printDeliveries(stdout, ds, true)
	} else {
		for _, d := range ds {
			fmt.Fprintf(stdout, "redelivering %s (job %d): available now, attempt %d of %d next\n", printable(d.Key), d.JobID, d.Attempts+1, d.MaxAttempts)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem outbox redeliver:", err)
		return 1
	}
	return 0
}

// notDeadText says where the deliveries of id are, for a refused
// redeliver.
func notDeadText(ctx context.Context, ob *outbox.Outbox, id string) string {
	ds, err := ob.Status(ctx, id)
	if err != nil || len(ds) == 0 {
		return "only dead deliveries are redelivered"
	}
	now := time.Now()
	var parts []string
	for i, d := range ds {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ds)-i))
			break
		}
		parts = append(parts, printable(d.Key)+" is "+deliveryNote(d, now, 80))
	}
	return strings.Join(parts, "; ")
}

// deliveryNote says where a delivery is in its life, cut to about n bytes.
func deliveryNote(d outbox.Delivery, now time.Time, n int) string {
	var s string
	switch d.State {
	case idemtype.JobAvailable:
		s = "waiting for a relay"
		if d.NextAttemptAt.After(now) {
			s = "next attempt " + ago(d.NextAttemptAt, now)
		}
		if d.LastError != "" {
			s += "; last error: " + d.LastError
		}
	case idemtype.JobRunning:
		s = "being sent (attempt " + strconv.Itoa(d.Attempts) + ")"
	case idemtype.JobCompleted:
		s = "delivered " + past(d.DeliveredAt, now)
		if d.Outcome != nil {
			s += ": HTTP " + strconv.Itoa(d.Outcome.Status)
		}
	case idemtype.JobCancelled:
		s = "cancelled (idem jobs cancel): never sent, or sent with its outcome not recorded"
	case idemtype.JobDead:
		s = "dead " + past(d.DeadAt, now)
		if d.LastError != "" {
			s += ": " + d.LastError
		}
	}
	if p, cut := preview([]byte(s), n); cut {
		s = string(p) + "…"
	}
	return printable(s)
}

// deliveryJSON is a delivery as the outbox commands print it with --json.
type deliveryJSON struct {
	Key           string            `json:"key"`
	JobID         int64             `json:"job_id"`
	URL           string            `json:"url"`
	State         idemtype.JobState `json:"state"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	LastError     string            `json:"last_error,omitempty"`
	Status        int               `json:"status,omitempty"` // the receiver's answer, once delivered
	NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
	DeliveredAt   *time.Time        `json:"delivered_at,omitempty"`
	DeadAt        *time.Time        `json:"dead_at,omitempty"`
}

func printDeliveries(w io.Writer, ds []outbox.Delivery, asJSON bool) error {
	if asJSON {
		out := make([]deliveryJSON, len(ds))
		for i, d := range ds {
			out[i] = deliveryJSON{
				Key: d.Key, JobID: d.JobID, URL: d.URL, State: d.State, Attempts: d.Attempts, MaxAttempts: d.MaxAttempts,
				LastError: d.LastError, NextAttemptAt: jsonTime(d.NextAttemptAt), DeliveredAt: jsonTime(d.DeliveredAt), DeadAt: jsonTime(d.DeadAt),
			}
			if d.Outcome != nil {
				out[i].Status = d.Outcome.Status
			}
		}
		return writeJSON(w, out)
	}
	now := time.Now()
	t := newTable(w, "KEY", "JOB", "STATE", "ATTEMPT", "URL", "NOTE")
	for _, d := range ds {
		t.row(printable(d.Key), strconv.FormatInt(d.JobID, 10), string(d.State),
			fmt.Sprintf("%d/%d", d.Attempts, d.MaxAttempts), printable(d.URL), deliveryNote(d, now, 80))
	}
	return t.flush()
}
