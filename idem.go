// Package idem makes side effects happen once.
//
// A Ledger decides, as one write in the database, whether an operation (a
// key inside a scope) is new, already done, or being done by someone else.
// The first caller gets a claim with a fencing token; a retry of a finished
// operation gets the stored result; a retry while the first still works gets
// InFlight; the same key with a different request gets Mismatch.
//
//	l, err := idem.Open(ctx, "sqlite:idem.db", nil)
//	if err != nil {
//		return err
//	}
//	defer l.Close()
//	op := idem.Op{Scope: "shop", Key: "order-42/charge", Fingerprint: "jcs-sha256:…"}
//	res, err := l.Do(ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		// The effect, written with tx, commits together with the done mark.
//		_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (42, 1999)`)
//		return []byte("charged"), err
//	})
//	// res.Replayed says whether this call ran the function or replayed its result.
//
// ExampleLedger_Do runs the same steps.
//
// What idem promises, and what it cannot, is in docs/contract.md.
package idem

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/driver/sqlite"
)

// Default durations, used where Options or Op leave a field zero.
const (
	DefaultLease        = 30 * time.Second
	DefaultRetention    = 24 * time.Hour
	DefaultTombstoneTTL = 7 * 24 * time.Hour
)

// Options configures a Ledger. A nil *Options means all defaults.
type Options struct {
	// Lease is how long a claim is trusted without a heartbeat when the Op
	// does not say. It must exceed the worst credible latency of the work.
	// Default 30s.
	Lease time.Duration
	// Retention is how long a completed record stays authoritative (replayed
	// to retries) when the Op does not say. Default 24h.
	Retention time.Duration
	// TombstoneTTL is how long, after retention, a compact tombstone
	// (scope, key, fingerprint, no result) stays so that a late replay is
	// reported as ErrExpired instead of running again. Default 7 days;
	// -1 keeps no tombstone: after retention the key is simply new.
	TombstoneTTL time.Duration
	// Stale is what a claim does when it finds an in-progress record whose
	// lease has ended. Default Redo.
	Stale StalePolicy
	// Reconciler is asked about stale claims under the Reconcile policy.
	Reconciler Reconciler
	// Logger receives one line per notable event (reclaims, parked claims,
	// lost leases, expired replays), each carrying scope, key, fingerprint
	// and attempt. Default: slog.Default().
	Logger *slog.Logger
	// Clock replaces the database clock. For tests only: in production every
	// lease must come from the one database clock.
	Clock func() time.Time
	// NoMigrate skips applying the embedded schema on Open; run
	// `idem migrate` (or the printed SQL) yourself.
	NoMigrate bool
	// SyncNormal runs SQLite with synchronous=NORMAL instead of FULL: safe
	// against a killed process, not against a power cut.
	SyncNormal bool
	// MaxBatch bounds group commit: concurrent claims, completions and
	// heartbeats that do not join a caller's transaction are written, at
	// most MaxBatch at a time, in one transaction (one fsync), and each
	// caller is answered only after that commit. A lone caller waits for
	// nobody. 0 means the driver's default (see docs/performance.md); -1
	// commits every write on its own.
	MaxBatch int
	// Observer, when set, is told about every claim outcome and finish, for
	// metrics. It must not block.
	Observer Observer
	// HashKeysInLogs logs KeyHash(key) instead of the key itself, for keys
	// that carry personal data (an email, an order number a customer sees).
	// Scope and fingerprint are logged as they are.
	HashKeysInLogs bool
}

// Ledger is the claim ledger on one database. It is safe for concurrent
// use by many goroutines; many processes and hosts may share the database.
type Ledger struct {
	drv       driver.Driver
	lease     time.Duration
	retention time.Duration
	tombstone time.Duration
	stale     StalePolicy
	reconcile Reconciler
	log       *slog.Logger
	hashKeys  bool
	obs       Observer
}

// Open opens the ledger at url and applies the schema (unless
// Options.NoMigrate). Known URLs:
//
//	sqlite:path/to/idem.db            (also sqlite://path; ?synchronous=normal)
//	postgres://user@host/db?…         (also postgresql://)
//
// An unknown scheme or an unreachable database is an error naming what was
// wrong.
func Open(ctx context.Context, url string, opts *Options) (*Ledger, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if _, err := newLedger(nil, &o); err != nil {
		return nil, err // bad options: nothing opened, nothing migrated
	}
	cfg := driver.Config{Now: o.Clock, NoMigrate: o.NoMigrate, SyncNormal: o.SyncNormal, MaxBatch: o.MaxBatch}
	drv, err := OpenDriver(ctx, url, cfg)
	if err != nil {
		return nil, err
	}
	l, err := New(drv, &o)
	if err != nil {
		drv.Close()
		return nil, err
	}
	return l, nil
}

// OpenDriver opens the database behind url without wrapping it in a
// Ledger. Jobs, outbox and inbox use it through their own constructors.
func OpenDriver(ctx context.Context, url string, cfg driver.Config) (driver.Driver, error) {
	scheme, rest, ok := strings.Cut(url, ":")
	if !ok {
		return nil, fmt.Errorf("idem: database URL %q has no scheme (want sqlite:PATH or postgres://…)", url)
	}
	switch scheme {
	case "sqlite", "sqlite3":
		return sqlite.Open(ctx, strings.TrimPrefix(rest, "//"), cfg)
	case "postgres", "postgresql":
		return postgres.Open(ctx, url, cfg)
	default:
		return nil, fmt.Errorf("idem: unknown database scheme %q in %q (want sqlite:PATH or postgres://…)", scheme, url)
	}
}

// New wraps an open driver. Most users call Open instead.
func New(drv driver.Driver, opts *Options) (*Ledger, error) {
	if drv == nil {
		return nil, &InputError{Field: "driver", Reason: "must not be nil"}
	}
	return newLedger(drv, opts)
}

// newLedger checks opts and builds the ledger around drv (nil to check only).
func newLedger(drv driver.Driver, opts *Options) (*Ledger, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	l := &Ledger{
		drv:       drv,
		lease:     cmp.Or(o.Lease, DefaultLease),
		retention: cmp.Or(o.Retention, DefaultRetention),
		tombstone: cmp.Or(o.TombstoneTTL, DefaultTombstoneTTL),
		stale:     cmp.Or(o.Stale, Redo),
		reconcile: o.Reconciler,
		log:       cmp.Or(o.Logger, slog.Default()),
		hashKeys:  o.HashKeysInLogs,
		obs:       o.Observer,
	}
	if l.tombstone < 0 {
		l.tombstone = 0
	}
	if err := checkDuration("lease", l.lease, minLease, maxLease); err != nil {
		return nil, err
	}
	if err := checkDuration("retention", l.retention, minRetention, maxRetention); err != nil {
		return nil, err
	}
	if l.stale == Reconcile && l.reconcile == nil {
		return nil, fmt.Errorf("idem: stale policy Reconcile needs Options.Reconciler")
	}
	return l, nil
}

// Driver returns the database driver, for the jobs, outbox and inbox
// packages that share the ledger's database. Not for application code.
func (l *Ledger) Driver() driver.Driver { return l.drv }

// Close closes the database.
func (l *Ledger) Close() error { return l.drv.Close() }
