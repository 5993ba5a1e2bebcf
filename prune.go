package idem

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// DefaultPruneDuty is PruneOptions.Duty's default: half the time for
// batches, half for the writes they would otherwise hold up.
const DefaultPruneDuty = 0.5

// maxPrunePause bounds one pause of the sweep.
const maxPrunePause = time.Second

// PruneOptions bounds a Prune. Nil means defaults.
type PruneOptions struct {
	// BatchSize is how many rows of each kind one batch may change: records
	// past retention (deleted, or made tombstones), tombstones past their
	// window, released keys past theirs. Default 1000.
	BatchSize int
	// MaxBatches stops after this many batches; 0 means until done.
	MaxBatches int
	// Progress, when set, is called after every batch with the totals.
	Progress func(PruneStats)
	// Duty bounds the share of time the sweep holds the database's writers
	// while more batches remain: after a batch that took d, the next starts
	// no sooner than d×(1−Duty)/Duty later, so that live claims get their
	// turn. Below 1 the next batch also waits for the ledger's writes to
	// have been idle 2 ms, down to a share of 0.1 (or Duty, if lower)
	// under load that never leaves them idle, so that the sweep backs off
	// under load and still finishes (see driver.PacedPruner). On SQLite,
	// where the sweep and the claims share one writer, a batch works in
	// steps of a few milliseconds, each its own transaction, and the
	// pause follows every step; on PostgreSQL a batch is one statement,
	// and it gives way to the writes of this process's ledger only.
	// Default 0.5 (DefaultPruneDuty); 1 runs the batches back to back.
	Duty float64
	// Vacuum, after a sweep that ran to its end (or to MaxBatches) and
	// changed rows, has the database make their space reusable at once. On
	// PostgreSQL it is a plain VACUUM of the ledger's table, which holds up
	// no reads or writes but reads the table and its indexes, and takes
	// the right to vacuum it (the table's or database's owner): without
	// it, the space waits for autovacuum's next pass, and sweeps that come
	// faster than those passes (a backlog cleared in a loop) grow the
	// table by what each one deleted. A pass reads each of the table's
	// indexes whole unless the dead rows sit on under 2% of its pages:
	// use it with sweeps minutes apart (idem prune from cron, a backlog),
	// not with a sweep every few seconds. On SQLite it does nothing more:
	// the sweep hands freed pages back as it goes.
	Vacuum bool
}

// Validate reports what Prune would refuse o for, without a ledger: for
// command lines that check their flags before opening a database. A bad
// option is an *InputError whose Field names it.
func (o *PruneOptions) Validate() error {
	_, err := o.duty()
	return err
}

// duty is the share in force: Duty, or its default when 0.
func (o *PruneOptions) duty() (float64, error) {
	switch d := o.Duty; {
	case d == 0:
		return DefaultPruneDuty, nil
	case !(d >= 0.05 && d <= 1): // NaN too
		return 0, &InputError{Field: "duty", Reason: fmt.Sprintf("%v: want a share between 0.05 and 1", d)}
	default:
		return d, nil
	}
}

// PruneStats totals what a Prune changed.
type PruneStats struct {
	idemtype.PruneCounts
	Batches int
	// Vacuumed is how long the pass PruneOptions.Vacuum asked for took;
	// 0 when none ran (nothing changed, the sweep stopped early, or the
	// database needs none).
	Vacuumed time.Duration
}

// Prune runs the retention sweep in bounded batches: completed records past
// retention lose their stored result and become tombstones; tombstones past
// their window are deleted; a completed record already past both windows
// is deleted at once (counted as tombstoned and deleted). It never touches an in-progress or parked
// record, and never a record still authoritative. Safe to run from many
// processes at once.
func (l *Ledger) Prune(ctx context.Context, opts *PruneOptions) (PruneStats, error) {
	var o PruneOptions
	if opts != nil {
		o = *opts
	}
	size := cmp.Or(o.BatchSize, 1000)
	var st PruneStats
	duty, err := o.duty()
	if err != nil {
		return st, err
	}
	// A driver that paces its own steps (SQLite's) pauses inside a batch;
	// the others pause here, between batches.
	pp, paced := l.drv.(driver.PacedPruner)
	for o.MaxBatches == 0 || st.Batches < o.MaxBatches {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		start := time.Now()
		var (
			r   idemtype.PruneCounts
			err error
		)
		if paced {
			r, err = pp.PrunePaced(ctx, size, duty)
		} else {
			r, err = l.drv.Prune(ctx, size)
		}
		// A paced batch that failed, or was stopped in a pause, reports
		// what it committed all the same: counted, and observed.
		st.Tombstoned += r.Tombstoned
		st.Deleted += r.Deleted
		if err != nil && r.Tombstoned+r.Deleted > 0 {
			l.observe(ctx, Event{Kind: EventPrune, Tombstoned: r.Tombstoned, Deleted: r.Deleted, Took: time.Since(start), Err: err})
		}
		if err != nil {
			return st, fmt.Errorf("idem: prune: %w", err)
		}
		st.Batches++
		l.observe(ctx, Event{Kind: EventPrune, Tombstoned: r.Tombstoned, Deleted: r.Deleted, Took: time.Since(start)})
		if o.Progress != nil {
			o.Progress(st)
		}
		if r.Tombstoned < size && r.Deleted < size {
			break
		}
		if !paced {
			if err := driver.DutyPause(ctx, time.Since(start), duty, maxPrunePause); err != nil {
				return st, err
			}
		}
	}
	if v, ok := l.drv.(driver.Vacuumer); ok && o.Vacuum && st.Tombstoned+st.Deleted > 0 {
		start := time.Now()
		if err := v.VacuumLedger(ctx); err != nil {
			return st, fmt.Errorf("%w: %w", ErrVacuum, err)
		}
		st.Vacuumed = time.Since(start)
	}
	return st, nil
}
