package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/metrics"
)

// Counter names a Reporter stores, summed over sources by the page.
const (
	CounterDuplicates = "duplicates_prevented" // replays plus in-flight rejections
	CounterReplays    = "replays"              // claims answered with a stored result
	CounterMismatches = "mismatches"
	CounterReclaims   = "reclaims"
	CounterExpired    = "expired_replays"
	CounterLeasesLost = "leases_lost"
)

// ReporterOptions configures a Reporter. A nil *ReporterOptions means the
// defaults.
type ReporterOptions struct {
	// Every is how often the counters are flushed. Default 5s.
	Every time.Duration
	// MaxKeys bounds the keys whose replays are held between two flushes,
	// and so the rows one flush updates (on SQLite it holds the writer
	// meanwhile: 0.2 s for 1,000 keys on a busy two-core machine); replays of further keys
	// count only in the totals. Default 1,000.
	MaxKeys int
	// Logger receives a line when a flush fails. Default slog.Default().
	Logger *slog.Logger
}

// Reporter stores one process's counters (duplicates prevented, replays,
// mismatches, reclaims, expired replays, leases lost) and per-key replay
// counts in the ledger's database, so that the admin page of any gateway
// shows the totals of all of them. Its Observer counts in memory, on the
// request path; a background flush writes, every ReporterOptions.Every
// and on Close, one transaction: never a write per request. Off unless
// made: idem serve makes one; a library user who wants the page's
// database totals hands Observer to idem.Options (with idem.Observers)
// and calls Start once the ledger is open.
//
// The database must implement driver.Activity (both of idem's drivers
// do, from migration 0011).
type Reporter struct {
	o      ReporterOptions
	log    *slog.Logger
	source string

	counts [6]atomic.Int64 // in the order of counterNames

	mu      sync.Mutex
	keys    map[keyID]*driver.KeyReplays // replayed since the last flush
	drv     driver.Activity
	stop    chan struct{}
	done    chan struct{}
	flushMu sync.Mutex // one flush at a time
}

type keyID struct{ scope, key string }

// flushTimeout is the least time a background flush is given: a short
// Every must not cut off a flush on a busy database.
const flushTimeout = 10 * time.Second

var counterNames = [...]string{CounterDuplicates, CounterReplays, CounterMismatches, CounterReclaims, CounterExpired, CounterLeasesLost}

// NewReporter returns a reporter whose source is this process: its host
// name, process id and a random suffix (a restarted process is a new
// source; the totals keep what the old one reported).
func NewReporter(opts *ReporterOptions) *Reporter {
	var o ReporterOptions
	if opts != nil {
		o = *opts
	}
	o.Every = cmp.Or(o.Every, 5*time.Second)
	o.MaxKeys = cmp.Or(o.MaxKeys, 1000)
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return &Reporter{o: o, log: cmp.Or(o.Logger, slog.Default()), keys: map[keyID]*driver.KeyReplays{},
		source: cmp.Or(host, "unknown") + " pid " + strconv.Itoa(os.Getpid()) + " #" + hex.EncodeToString(b[:])}
}

// Source is the name this process reports under.
func (r *Reporter) Source() string { return r.source }

// Observer counts claims (by metrics.ClassifyClaim) and lost leases as
// metrics.Collector does. It never blocks on I/O.
func (r *Reporter) Observer() idem.Observer {
	return func(_ context.Context, e idem.Event) {
		switch e.Kind {
		case idem.EventLeaseLost:
			r.counts[5].Add(1)
		case idem.EventClaim:
			k := metrics.ClassifyClaim(e)
			for i, on := range [...]bool{k.Duplicate, k.Replay, k.Mismatch, k.Reclaim, k.Expired} {
				if on {
					r.counts[i].Add(1)
				}
			}
			if k.Replay {
				r.replayed(e.Op.Scope, e.Op.Key)
			}
		}
	}
}

func (r *Reporter) replayed(scope, key string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyID{scope, key}
	if kr := r.keys[k]; kr != nil {
		kr.N++
		kr.Last = now
		return
	}
	if len(r.keys) < r.o.MaxKeys {
		r.keys[k] = &driver.KeyReplays{Scope: scope, Key: key, N: 1, Last: now}
	}
}

// Start begins flushing to l's database every ReporterOptions.Every. It
// fails if the database cannot store reports (a driver without
// driver.Activity) or Start was called before.
func (r *Reporter) Start(l *idem.Ledger) error {
	drv, ok := l.Driver().(driver.Activity)
	if !ok {
		return fmt.Errorf("admin: reporter: the %s driver cannot store reports (no driver.Activity)", l.Driver().Name())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drv != nil {
		return errors.New("admin: reporter already started")
	}
	r.drv, r.stop, r.done = drv, make(chan struct{}), make(chan struct{})
	go r.loop(r.stop, r.done)
	return nil
}

func (r *Reporter) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(r.o.Every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(r.o.Every, flushTimeout))
			if err := r.Flush(ctx); err != nil {
				r.log.Warn("admin: reporter: flush failed; the next one retries", "err", err)
			}
			cancel()
		}
	}
}

// Flush writes the counters and the replays held now, in one transaction.
// Replays it could not write (the transaction failed, or a record was
// locked by a claim) are kept for the next flush; after a failure whose
// outcome is unknown they may count twice.
func (r *Reporter) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	drv := r.drv
	if drv == nil {
		r.mu.Unlock()
		return errors.New("admin: reporter not started")
	}
	keys := r.keys
	r.keys = map[keyID]*driver.KeyReplays{}
	r.mu.Unlock()

	rep := driver.ActivityReport{Source: r.source, Counters: make(map[string]int64, len(counterNames))}
	for i, n := range counterNames {
		rep.Counters[n] = r.counts[i].Load()
	}
	for _, k := range slices.SortedFunc(maps.Keys(keys), func(a, b keyID) int {
		return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.key, b.key))
	}) {
		rep.Replays = append(rep.Replays, *keys[k])
	}
	busy, err := drv.ReportActivity(ctx, rep)
	if err != nil {
		busy = rep.Replays
	}
	if len(busy) > 0 {
		r.mu.Lock()
		for _, b := range busy {
			k := keyID{b.Scope, b.Key}
			if kr := r.keys[k]; kr != nil {
				kr.N += b.N
				if b.Last.After(kr.Last) {
					kr.Last = b.Last
				}
			} else if len(r.keys) < r.o.MaxKeys {
				r.keys[k] = &b
			}
		}
		r.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("admin: reporter: %w", err)
	}
	return nil
}

// Close stops the background flush and flushes once more, for up to 5
// seconds. Safe to call on a reporter never started, and more than once.
func (r *Reporter) Close() error {
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.stop = nil
	r.mu.Unlock()
	if stop == nil {
		return nil
	}
	close(stop)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Flush(ctx)
}
