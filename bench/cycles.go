package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
)

// pruneCycles is how many times the cycles rows fill and prune one ledger.
const pruneCycles = 3

// cycleRows fills one ledger with Keys completed records and prunes all of
// them, pruneCycles times, each fill at a clock moved past the previous
// records' windows: whether the space the prunes free is used again, or
// the ledger grows with every cycle. One row per cycle, its prune rate
// against the first cycle's, the ledger's size after the fill and after
// the prune. Then one more fill, pruned in two phases (tombstoneRows).
// Options.Runs does not apply: the cycles are already repeats
// of one another, and each consumes its fill; they run once.
func (r *runner) cycleRows(ctx context.Context) ([]Result, error) {
	if r.db.shared {
		return nil, errors.New("the cycles rows fill a database with millions of rows: give them one of their own (--db sqlite or --db postgres)")
	}
	n := r.o.Keys
	url, err := r.db.fresh(ctx)
	if err != nil {
		return nil, err
	}
	var shift atomic.Int64
	l, err := openScale(ctx, url, &idem.Options{Clock: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	sizer := l.Driver().(driver.Filler)
	var out []Result
	var first float64
	for i := 1; i <= pruneCycles; i++ {
		r.progress("cycles: %d of %d: filling the ledger with %d completed records", i, pruneCycles, n)
		fill, err := fillLedger(ctx, l, n)
		if err != nil {
			return out, err
		}
		shift.Add(int64(pruneShift))
		r.progress("cycles: %d of %d: pruning them", i, pruneCycles)
		var p pruneStat
		if err := p.runWith(ctx, l, &idem.PruneOptions{BatchSize: pruneBatch, Vacuum: r.o.CycleVacuum}); err != nil {
			return out, err
		}
		after, err := sizer.LedgerSize(ctx)
		if err != nil {
			return out, err
		}
		if i == 1 {
			first = p.perSec()
		}
		res := Result{Group: GroupCycles, Name: fmt.Sprintf("cycles: fill and prune %d keys, cycle %d", n, i), Driver: r.db.driver,
			Concurrency: 1, Baseline: "the first cycle's prune", OpsPerSec: p.perSec(), BaselineOpsPerS: first,
			DurationSeconds: p.took.Seconds(), Durability: r.db.durability, Keys: n, FillSeconds: fill.took.Seconds(),
			BytesPerKey: fill.bytesPerKey, DiskBytesBefore: fill.size.Ledger, DiskBytesAfter: after.Ledger}
		if first > 0 {
			res.Ratio = res.OpsPerSec / first
		}
		res.Note = fmt.Sprintf("filled in %.1fs; pruned %d records in %.1fs (%s a batch of %d); idem_keys %s after the fill, %s after the prune; database %s",
			fill.took.Seconds(), p.deleted, p.took.Seconds(), p.perBatch(), pruneBatch, mib(fill.size.Ledger), mib(after.Ledger), mib(after.File))
		res.Note += vacuumNote(p.vacuumed)
		if r.o.CyclePause > 0 && i < pruneCycles {
			res.Note += fmt.Sprintf("; then a pause of %s", r.o.CyclePause)
			r.progress("cycles: %d of %d: pausing %s", i, pruneCycles, r.o.CyclePause)
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(r.o.CyclePause):
			}
		}
		out = append(out, res)
	}
	rows, err := r.tombstoneRows(ctx, l, &shift, sizer, first)
	return append(out, rows...), err
}

// tombstoneRows fills the cycles' ledger once more and prunes it the way
// records age in service: first with the clock just past their retention
// (each record loses its stored response and becomes a tombstone, an
// UPDATE), then past their tombstone window (the tombstones are deleted).
// Each phase is a row against the first cycle's prune, which deleted
// records past both windows at once.
func (r *runner) tombstoneRows(ctx context.Context, l *idem.Ledger, shift *atomic.Int64, sizer driver.Filler, first float64) ([]Result, error) {
	n := r.o.Keys
	r.progress("cycles: tombstones: filling the ledger with %d completed records", n)
	fill, err := fillLedger(ctx, l, n)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, phase := range []struct {
		name  string
		shift time.Duration
		count func(idem.PruneStats) int
	}{
		{fmt.Sprintf("cycles: tombstone %d keys past retention", n), idem.DefaultRetention + time.Hour,
			func(st idem.PruneStats) int { return st.Tombstoned }},
		{fmt.Sprintf("cycles: delete %d tombstones past their window", n), idem.DefaultTombstoneTTL,
			func(st idem.PruneStats) int { return st.Deleted }},
	} {
		shift.Add(int64(phase.shift))
		r.progress("%s", phase.name)
		t0 := time.Now()
		st, err := l.Prune(ctx, &idem.PruneOptions{BatchSize: pruneBatch, Vacuum: r.o.CycleVacuum})
		took := time.Since(t0)
		if err != nil {
			return out, err
		}
		if got := phase.count(st); got != n {
			return out, fmt.Errorf("%s: %d records changed, want %d: %w", phase.name, got, n, errUnexpected)
		}
		after, err := sizer.LedgerSize(ctx)
		if err != nil {
			return out, err
		}
		res := Result{Group: GroupCycles, Name: phase.name, Driver: r.db.driver, Concurrency: 1,
			Baseline: "the first cycle's prune (records past both windows, deleted at once)", OpsPerSec: float64(n) / took.Seconds(),
			BaselineOpsPerS: first, DurationSeconds: took.Seconds(), Durability: r.db.durability, Keys: n,
			FillSeconds: fill.took.Seconds(), BytesPerKey: fill.bytesPerKey, DiskBytesBefore: fill.size.Ledger, DiskBytesAfter: after.Ledger}
		if first > 0 {
			res.Ratio = res.OpsPerSec / first
		}
		res.Note = fmt.Sprintf("%d records in %.1fs in %d batches of %d; idem_keys %s after the fill, %s after this prune; database %s",
			n, took.Seconds(), st.Batches, pruneBatch, mib(fill.size.Ledger), mib(after.Ledger), mib(after.File))
		res.Note += vacuumNote(st.Vacuumed)
		out = append(out, res)
	}
	return out, nil
}

// vacuumNote says how much of a prune's time its PruneOptions.Vacuum pass
// took; "" when none ran.
func vacuumNote(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("; the prune's time includes a VACUUM of %.1fs", d.Seconds())
}
