package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemdev/idem"
)

const pruneUsage = "idem prune [--db URL] [--dry-run] [--batch N] [--max-batches N] [--duty F] [--vacuum] [--json]"

func init() {
	register(command{
		name:    "prune",
		usage:   pruneUsage,
		summary: "run the retention sweep: drop expired results, delete old tombstones",
		run:     runPrune,
	})
}

type pruneJSON struct {
	DryRun     bool `json:"dry_run"`
	Tombstoned int  `json:"tombstoned"`
	Deleted    int  `json:"deleted"`
	Batches    int  `json:"batches"`
	Complete   bool `json:"complete"` // false when stopped by --max-batches, an error or a signal
	// What --max-batches left for the next run, when it stopped the sweep.
	LeftTombstone *int `json:"left_to_tombstone,omitempty"`
	LeftDelete    *int `json:"left_to_delete,omitempty"`
	// Seconds the --vacuum pass took; absent when none ran.
	VacuumSeconds *float64 `json:"vacuum_seconds,omitempty"`
}

func runPrune(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("prune", pruneUsage, stderr)
	setUsage(fs, pruneUsage, `
Runs the retention sweep in bounded batches, each its own short write, and
prints a progress line per batch on stderr:

  - a completed record past its retention loses its stored result and
    becomes a tombstone (a late retry is then refused as expired, not run);
  - a tombstone past its window, and a long-released key, is deleted.

In-progress and parked records, and records still replayed, are never
touched. Each record keeps the retention it was claimed with. Safe to run
from several hosts at once, and to interrupt (Ctrl-C stops after the
current batch). --dry-run counts what a sweep would change now, writing
nothing.

--duty bounds the share of the time the sweep holds the database's
writers while more remains (default 0.5: after a batch, or on SQLite a
step of one, a pause as long). 1 runs the batches back to back, for a
backlog at a quiet hour; live claims then wait behind each batch.

--vacuum, on PostgreSQL, runs a plain VACUUM of idem_keys once a sweep
that changed rows is done, so that new rows reuse their space at once
instead of after autovacuum's next pass. It holds up no reads or writes,
reads the table and its indexes, and takes the table's (or database's)
owner. On SQLite it does nothing more: the sweep hands pages back as it
goes.`)
	db := fs.String("db", "", dbFlagHelp)
	dry := fs.Bool("dry-run", false, "count what would change; write nothing")
	batch := fs.Int("batch", 1000, "change at most `N` rows of each kind per batch (1…100000)")
	maxBatches := fs.Int("max-batches", 0, "stop after `N` batches (0: until done)")
	duty := fs.Float64("duty", idem.DefaultPruneDuty, "share `F` of the time the sweep may hold the writers (0.05…1; 1: batches back to back)")
	vacuum := fs.Bool("vacuum", false, "on PostgreSQL, VACUUM the ledger's table after a sweep that changed rows")
	asJSON := fs.Bool("json", false, "print the totals as JSON")
	logf := addLogFlags(fs, "info")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	if *batch < 1 || *batch > 100000 {
		return usageError(fs, stderr, "--batch %d: want 1…100000", *batch)
	}
	if *maxBatches < 0 {
		return usageError(fs, stderr, "--max-batches %d: want 0 or more", *maxBatches)
	}
	opts := &idem.PruneOptions{BatchSize: *batch, MaxBatches: *maxBatches, Duty: *duty, Vacuum: *vacuum}
	if *duty == 0 { // the library reads 0 as its default; a flag given 0 means none
		return usageError(fs, stderr, "--duty 0: want a share of the time above 0 (without --duty: %v)", idem.DefaultPruneDuty)
	}
	if bad := (*idem.InputError)(nil); errors.As(opts.Validate(), &bad) {
		return usageError(fs, stderr, "--%s %s", bad.Field, bad.Reason)
	}
	log, err := logf.logger(stderr)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	l, err := openLedger(ctx, *db, &idem.Options{Logger: log, HashKeysInLogs: logf.hashKeys})
	if err != nil {
		return openFailed(stderr, "prune", err)
	}
	defer l.Close()

	if *dry {
		st, err := l.PruneCount(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "idem prune:", err)
			return 1
		}
		if *asJSON {
			writeJSON(stdout, pruneJSON{DryRun: true, Tombstoned: st.Tombstoned, Deleted: st.Deleted, Complete: true})
		} else {
			fmt.Fprintf(stdout, "dry run: would tombstone %d and delete %d (nothing written)\n", st.Tombstoned, st.Deleted)
		}
		return 0
	}

	opts.Progress = func(s idem.PruneStats) {
		fmt.Fprintf(stderr, "idem prune: batch %d: %d tombstoned, %d deleted so far\n", s.Batches, s.Tombstoned, s.Deleted)
	}
	st, err := l.Prune(ctx, opts)
	// A failed vacuum comes after the sweep ran to its end: exit 1 all the same.
	swept := err == nil || errors.Is(err, idem.ErrVacuum)
	out := pruneJSON{Tombstoned: st.Tombstoned, Deleted: st.Deleted, Batches: st.Batches, Complete: swept}
	if st.Vacuumed > 0 {
		secs := st.Vacuumed.Seconds()
		out.VacuumSeconds = &secs
	}
	if swept && *maxBatches > 0 && st.Batches == *maxBatches {
		// Stopped by --max-batches: say what is left, if it can be counted.
		if left, cerr := l.PruneCount(ctx); cerr == nil {
			out.Complete = left.Tombstoned == 0 && left.Deleted == 0
			out.LeftTombstone, out.LeftDelete = &left.Tombstoned, &left.Deleted
		} else {
			out.Complete = false
		}
	}
	if *asJSON {
		writeJSON(stdout, out)
	} else {
		fmt.Fprintf(stdout, "pruned: %d tombstoned, %d deleted in %d batches\n", st.Tombstoned, st.Deleted, st.Batches)
		if st.Vacuumed > 0 {
			fmt.Fprintf(stdout, "vacuumed the ledger's table in %s\n", st.Vacuumed.Round(time.Millisecond))
		}
		switch {
		case out.LeftTombstone != nil && !out.Complete:
			fmt.Fprintf(stdout, "stopped at --max-batches: %d to tombstone and %d to delete remain; run again to continue\n", *out.LeftTombstone, *out.LeftDelete)
		case !out.Complete:
			fmt.Fprintln(stdout, "stopped before the end; run again to continue")
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem prune:", err)
		return 1
	}
	return 0
}
