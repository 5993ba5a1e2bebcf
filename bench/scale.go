package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
)

// DefaultKeys is how many records the scale rows fill the ledger with when
// Options.Keys is zero.
const DefaultKeys = 1_000_000

// Shape of the filled records: random UUIDv4 keys spread over scaleScopes
// scopes, each holding a 1 KiB stored response, completed a minute before
// the rows run.
const (
	scaleScopes = 1000
	scaleSample = 1000 // old keys the replay rows draw from
	scaleAge    = time.Minute
)

// scaleBody is the stored response of every filled record and of every
// record the scale rows write: 1 KiB of JSON-like text.
var scaleBody = func() []byte {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte(`{"id":"`)
	for len(b) < 1022 {
		b = append(b, chars[rand.IntN(len(chars))])
	}
	return append(b, `"}`...)
}()

// pruneShift moves the prune rows' clock past every filled record's
// retention and tombstone window.
const pruneShift = idem.DefaultRetention + idem.DefaultTombstoneTTL + time.Hour

// pruneBatch is the prune's batch size: PruneOptions' default.
const pruneBatch = 1000

// pruneAloneMax bounds the records each prune alone removes (before and
// after the rows under load), so that a run at 10M keys measures the
// prune's rate without spending an hour removing all of it.
const pruneAloneMax = 1_000_000

// scaleRows measures the ledger holding Keys records against an empty one
// (claim+complete of new keys, replays of old keys), then, on the same
// full ledger seen by a clock moved past every record's window, a prune of
// all of it: alone, and with claim+complete running next to it.
func (r *runner) scaleRows(ctx context.Context) ([]Result, error) {
	if r.db.shared {
		return nil, errors.New("the scale rows fill a database with millions of rows: give them one of their own (--db sqlite or --db postgres)")
	}
	n := r.o.Keys
	fullURL, err := r.db.fresh(ctx)
	if err != nil {
		return nil, err
	}
	emptyURL, err := r.db.fresh(ctx)
	if err != nil {
		return nil, err
	}
	full, err := openScale(ctx, fullURL, nil)
	if err != nil {
		return nil, err
	}
	defer func() { full.Close() }()
	empty, err := openScale(ctx, emptyURL, nil)
	if err != nil {
		return nil, err
	}
	defer empty.Close()

	r.progress("scale: filling the ledger with %d completed records", n)
	fill, err := fillLedger(ctx, full, n)
	if err != nil {
		return nil, err
	}
	r.progress("scale: filled in %.1fs: %.0f bytes per key (%s)", fill.took.Seconds(), fill.bytesPerKey, fill.size.How)
	// The empty side holds only the keys its replays read.
	small, err := fillLedger(ctx, empty, scaleSample)
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%d records filled in %.1fs (%.0f/s); %.0f bytes per key on disk (%s)",
		n, fill.took.Seconds(), float64(n)/fill.took.Seconds(), fill.bytesPerKey, fill.size.How)
	if r.o.Runs > 1 {
		note += fmt.Sprintf("; every scale row the median of %d runs, one after the other on this one fill", r.o.Runs)
	}
	scaled := func(res Result) Result {
		res.Keys, res.FillSeconds, res.BytesPerKey = n, fill.took.Seconds(), fill.bytesPerKey
		if res.Concurrency == r.o.Concurrency[0] && strings.HasPrefix(res.Name, "scale claim+complete") {
			res.Note = note // once in the table; every JSON row has the numbers
		}
		return res
	}

	var out []Result
	for _, c := range r.o.Concurrency {
		row, err := r.medianRun(func(int) (Result, error) {
			r.progress("scale claim+complete, %s: %d keys, empty", callers(c), n)
			res, err := compare(ctx, c, r.o.Duration,
				side{name: "full", op: scaleClaimComplete(full)},
				side{name: "empty", op: scaleClaimComplete(empty)})
			if err != nil {
				return Result{}, fmt.Errorf("claim+complete at %d keys, %s: %w", n, callers(c), err)
			}
			return scaled(newResult(GroupScale, fmt.Sprintf("scale claim+complete at %d keys", n),
				"the same on an empty ledger", r.db, c, r.o.Duration, res[0], res[1], true)), nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, row)
		row, err = r.medianRun(func(int) (Result, error) {
			r.progress("scale replay, %s: %d keys, empty", callers(c), n)
			res, err := compare(ctx, c, r.o.Duration,
				side{name: "full", op: scaleReplay(full, fill.sample)},
				side{name: "empty", op: scaleReplay(empty, small.sample)})
			if err != nil {
				return Result{}, fmt.Errorf("replay at %d keys, %s: %w", n, callers(c), err)
			}
			return scaled(newResult(GroupScale, fmt.Sprintf("scale replay at %d keys", n),
				fmt.Sprintf("the same on an empty ledger (%d keys, all replayed)", len(small.sample)), r.db, c, r.o.Duration, res[0], res[1], true)), nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, row)
	}
	full.Close()
	rows, err := r.pruneRows(ctx, fullURL, n)
	return append(out, rows...), err
}

// pruneRows reopens the full ledger with its clock moved past every
// record's window, so that all of it is due for pruning, and measures the
// prune: about half of it alone, then the rest in turns with claim+complete
// running next to it, against the same claim+complete with no prune, then
// what is left (at most pruneAloneMax records) alone again.
//
// With Options.Runs above 1 the prune budget of each step is shared out
// among the runs (never more in all than one run prunes): run k prunes its
// share alone before the rows under load and after them, and measures
// claim+complete while pruning with its share of the rest, at each
// concurrency. Each run is a measurement of both prune rates, alone and
// under load, on what the runs before it left of the one fill.
func (r *runner) pruneRows(ctx context.Context, url string, n int) ([]Result, error) {
	l, err := openScale(ctx, url, &idem.Options{Clock: func() time.Time { return time.Now().Add(pruneShift) }})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	sizer := l.Driver().(driver.Filler)
	before, err := sizer.LedgerSize(ctx)
	if err != nil {
		return nil, err
	}
	runs := r.o.Runs
	alone := make([]pruneStat, runs)  // by run
	loaded := make([]pruneStat, runs) // by run, every concurrency's prune under load added
	first := max(1, min(n/2, pruneAloneMax)/pruneBatch)
	r.progress("scale prune, alone: half of %d expired records (at most %d)", n, pruneAloneMax)
	for k := range runs {
		if err := alone[k].runShare(ctx, l, first, runs, k); err != nil {
			return nil, err
		}
	}
	var out []Result
	// Each concurrency gets an equal share of the rest, so that the prune
	// does not run out during the first.
	budget := max(1, (n-min(n/2, pruneAloneMax))/pruneBatch/len(r.o.Concurrency))
	for _, c := range r.o.Concurrency {
		var rows []Result
		err := r.repeat(func(k int) error {
			res, during, err := r.whilePruning(ctx, l, c, share(budget, runs, k))
			if err != nil {
				return err
			}
			res.Keys = n
			if runs > 1 {
				res.Note += fmt.Sprintf("; run %d of %d on one fill, %d of the prune's batches its share", k+1, runs, share(budget, runs, k))
			}
			rows = append(rows, res)
			loaded[k].add(during)
			return nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, median(rows))
	}
	r.progress("scale prune, alone: the rest (at most %d records)", pruneAloneMax)
	for k := range runs {
		if err := alone[k].runShare(ctx, l, pruneAloneMax/pruneBatch, runs, k); err != nil {
			return out, err
		}
	}
	after, err := sizer.LedgerSize(ctx)
	if err != nil {
		return out, err
	}
	var all pruneStat
	for k := range runs {
		all.add(alone[k])
		all.add(loaded[k])
	}
	var rows []Result
	for k := range runs {
		p := Result{Group: GroupScale, Name: "scale prune (records/s) under claim+complete", Driver: r.db.driver, Concurrency: 1,
			Baseline: "the same prune alone", OpsPerSec: loaded[k].perSec(), BaselineOpsPerS: alone[k].perSec(),
			DurationSeconds: loaded[k].took.Seconds(), Durability: r.db.durability, Keys: n,
			DiskBytesBefore: before.File, DiskBytesAfter: after.File}
		if p.BaselineOpsPerS > 0 {
			p.Ratio = p.OpsPerSec / p.BaselineOpsPerS
		}
		p.Note = fmt.Sprintf("one pruner, batches of %d; %d records tombstoned and deleted (%d alone in %.1fs, %s a batch; %d under load in %.1fs, %s a batch); "+
			"idem_keys %s → %s, database %s → %s", pruneBatch, alone[k].deleted+loaded[k].deleted, alone[k].deleted, alone[k].took.Seconds(), alone[k].perBatch(),
			loaded[k].deleted, loaded[k].took.Seconds(), loaded[k].perBatch(), mib(before.Ledger), mib(after.Ledger), mib(before.File), mib(after.File))
		if runs > 1 {
			p.Note = fmt.Sprintf("run %d of %d, one after the other on one fill (%d records tombstoned and deleted in all): ", k+1, runs, all.deleted) + p.Note
		}
		if r.db.driver == "sqlite" {
			p.Note += fmt.Sprintf(" (%s of it free pages, kept by the file until a VACUUM)", mib(after.Free))
		}
		rows = append(rows, p)
	}
	return append(out, median(rows)), nil
}

// whilePruning measures claim+complete on l while a prune of at most
// budget batches runs next to it, against the same with no prune running.
func (r *runner) whilePruning(ctx context.Context, l *idem.Ledger, c, budget int) (Result, pruneStat, error) {
	var (
		stop   atomic.Bool
		wg     sync.WaitGroup
		runErr error
		during pruneStat
	)
	// The pruner stops between batches, never inside one: a batch cut
	// short would be work done (or not) but not counted.
	with := side{name: "pruning", op: scaleClaimComplete(l),
		before: func() {
			stop.Store(false)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() && !during.done && during.batches < budget {
					if err := during.run(ctx, l, 1); err != nil {
						runErr = err
						return
					}
				}
			}()
		},
		after: func() {
			stop.Store(true)
			wg.Wait()
		}}
	r.progress("scale claim+complete while pruning, %s: pruning, not pruning", callers(c))
	res, err := compare(ctx, c, r.o.Duration, with, side{name: "not-pruning", op: scaleClaimComplete(l)})
	if err == nil {
		err = runErr
	}
	if err != nil {
		return Result{}, during, fmt.Errorf("claim+complete while pruning, %s: %w", callers(c), err)
	}
	res0 := newResult(GroupScale, "scale claim+complete while pruning", "the same on the same ledger, no prune running",
		r.db, c, r.o.Duration, res[0], res[1], true)
	res0.Note = fmt.Sprintf("the prune ran %.0f%% of the time measured with it and removed %d records (%.0f/s) in batches of %s on average",
		100*min(1, during.took.Seconds()/res[0].Wall.Seconds()), during.deleted, during.perSec(), during.perBatch())
	if res[0].Ops == 0 {
		res0.P50, res0.P99 = nil, nil // not observed: no operation fit in a slice
		res0.Note += "; no claim+complete finished inside a slice while it ran"
	}
	return res0, during, nil
}

// share is run k's part of total shared out among runs: parts that differ
// by at most one and add up to total.
func share(total, runs, k int) int {
	n := total / runs
	if k < total%runs {
		n++
	}
	return n
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// pruneStat totals one or more prunes.
type pruneStat struct {
	deleted int
	batches int
	took    time.Duration
	done    bool // a prune ran out of records
	// vacuumed is the part of took spent in PruneOptions.Vacuum's pass.
	vacuumed time.Duration
}

func (s *pruneStat) perSec() float64 {
	if s.took <= 0 {
		return 0
	}
	return float64(s.deleted) / s.took.Seconds()
}

func (s *pruneStat) perBatch() time.Duration {
	if s.batches == 0 {
		return 0
	}
	return (s.took / time.Duration(s.batches)).Round(100 * time.Microsecond)
}

func (s *pruneStat) add(o pruneStat) {
	s.deleted += o.deleted
	s.batches += o.batches
	s.took += o.took
}

// runShare runs run k's share of a prune of at most batches batches
// shared out among runs (see share); a share of nothing prunes nothing.
func (s *pruneStat) runShare(ctx context.Context, l *idem.Ledger, batches, runs, k int) error {
	if b := share(batches, runs, k); b > 0 {
		return s.run(ctx, l, b)
	}
	return nil
}

// run prunes (at most batches batches; 0 until done) and adds what it
// deleted and how long it ran.
func (s *pruneStat) run(ctx context.Context, l *idem.Ledger, batches int) error {
	return s.runWith(ctx, l, &idem.PruneOptions{BatchSize: pruneBatch, MaxBatches: batches})
}

// runWith is run with the options given, which also say how many batches.
func (s *pruneStat) runWith(ctx context.Context, l *idem.Ledger, o *idem.PruneOptions) error {
	batches := o.MaxBatches
	t0 := time.Now()
	st, err := l.Prune(ctx, o)
	s.vacuumed += st.Vacuumed
	s.took += time.Since(t0)
	s.deleted += st.Deleted
	s.batches += st.Batches
	// Prune stops early when a batch comes back short: nothing is left.
	if err == nil && (batches == 0 || st.Batches < batches || batches == 1 && st.Tombstoned < pruneBatch && st.Deleted < pruneBatch) {
		s.done = true
	}
	return err
}

func openScale(ctx context.Context, url string, opts *idem.Options) (*idem.Ledger, error) {
	o := idem.Options{}
	if opts != nil {
		o = *opts
	}
	o.Logger = quiet
	l, err := dburl.Open(ctx, url, &o)
	if err != nil {
		return nil, err
	}
	if _, ok := l.Driver().(driver.Filler); !ok {
		l.Close()
		return nil, fmt.Errorf("the %s driver cannot fill a ledger in bulk (driver.Filler)", l.Driver().Name())
	}
	return l, nil
}

type filled struct {
	took        time.Duration
	size        driver.Size
	bytesPerKey float64
	sample      []driver.FilledKey
}

// fillLedger fills l with n completed records and measures what they take
// on disk.
func fillLedger(ctx context.Context, l *idem.Ledger, n int) (filled, error) {
	f := l.Driver().(driver.Filler)
	var out filled
	size0, err := f.LedgerSize(ctx)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	out.sample, err = f.FillCompleted(ctx, driver.FillParams{N: n, Scope: name("scale"), Scopes: scaleScopes, Body: scaleBody,
		Retention: idem.DefaultRetention, TombstoneTTL: idem.DefaultTombstoneTTL, Age: scaleAge, Sample: min(n, scaleSample)})
	out.took = time.Since(t0)
	if err != nil {
		return out, err
	}
	if len(out.sample) == 0 {
		return out, errors.New("the fill returned no keys to replay")
	}
	if out.size, err = f.LedgerSize(ctx); err != nil {
		return out, err
	}
	out.bytesPerKey = float64(out.size.Ledger-size0.Ledger) / float64(n)
	return out, nil
}

// uuidV4 returns a random UUIDv4, as clients make idempotency keys.
func uuidV4() string {
	var b [16]byte
	for i := range 2 {
		v := rand.Uint64()
		for j := range 8 {
			b[8*i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// scaleClaimComplete claims and completes a new random key in one of the
// filled scopes' names, storing a 1 KiB response.
func scaleClaimComplete(l *idem.Ledger) opFunc {
	scope := name("scale")
	return one(func(ctx context.Context, w int, seq int64) error {
		op := idem.Op{Scope: fmt.Sprintf("%s-%d", scope, rand.IntN(scaleScopes)), Key: uuidV4(), Fingerprint: "fill"}
		c, err := l.Claim(ctx, op)
		if err != nil {
			return err
		}
		if c.Outcome != idem.Acquired {
			return fmt.Errorf("claim of a new key: %s: %w", c.Outcome, errUnexpected)
		}
		return l.Complete(ctx, c, idem.Result{Status: 201, Body: scaleBody})
	})
}

// scaleReplay claims a random key of sample, which must replay.
func scaleReplay(l *idem.Ledger, sample []driver.FilledKey) opFunc {
	return one(func(ctx context.Context, w int, seq int64) error {
		k := sample[rand.IntN(len(sample))]
		c, err := l.Claim(ctx, idem.Op{Scope: k.Scope, Key: k.Key, Fingerprint: "fill"})
		if err != nil {
			return err
		}
		if c.Outcome != idem.Replay {
			return fmt.Errorf("claim of a completed key: %s: %w", c.Outcome, errUnexpected)
		}
		return nil
	})
}
