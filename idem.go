// Package idem makes side effects happen once.
//
// A Ledger decides, as one write in the database, whether an operation (a
// key inside a scope) is new, already done, or being done by someone else.
// The first caller gets a claim with a fencing token; a retry of a finished
// operation gets the stored result; a retry while the first still works gets
// InFlight; the same key with a different request gets Mismatch.
//
// A ledger runs on the application's own database handle, through a driver
// made from it: postgres.New(pool) on a pgx pool, sqlite.New(db) on a
// *sql.DB opened with any SQLite library. This package imports no database
// driver; package dburl opens one from a URL, for the CLI and quick starts.
// Every ...Tx method joins the application's own transaction (a *sql.Tx,
// or a pgx.Tx on the postgres driver), so a business write and idem's
// record commit together.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db1/shop") // or the pool the application has
//	if err != nil {
//		return err
//	}
//	l, err := idem.New(ctx, postgres.New(pool, nil), nil)
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
// ExampleLedger_Do runs the same steps on SQLite.
//
// What idem promises, and what it cannot, is in docs/contract.md; the path
// of a claim through the code is in docs/architecture.md.
package idem

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemdev/idem/driver"
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
	// lease has ended. Default StaleRedo.
	Stale StalePolicy
	// Reconciler is asked about stale claims under the StaleReconcile policy.
	Reconciler Reconciler
	// Logger receives one line per notable event (reclaims, parked claims,
	// lost leases, expired replays), each carrying scope, key, fingerprint
	// and attempt. Default: slog.Default().
	Logger *slog.Logger
	// Clock replaces the database clock. For tests only: in production every
	// lease must come from the one database clock.
	Clock func() time.Time
	// NoMigrate skips applying the embedded schema in New; run
	// `idem migrate` (or the printed SQL) yourself.
	NoMigrate bool
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

// Tx is an open transaction of the application's that a ...Tx method
// joins: a *sql.Tx begun on any pool open on the ledger's database, or a
// pgx.Tx on a driver made with postgres.New. Any other value is an
// *InputError. The method's writes commit or roll back with it.
type Tx any

// New opens a ledger on drv, a driver made from the application's database
// handle (postgres.New(pool), sqlite.New(db)): it checks the options, sets
// the driver up and applies the schema (unless Options.NoMigrate). A nil
// *Options means all defaults. Close the ledger to stop its background
// work; the application's handle stays open unless the driver was made to
// own it.
func New(ctx context.Context, drv driver.Driver, opts *Options) (*Ledger, error) {
	if drv == nil {
		return nil, &InputError{Field: "driver", Reason: "must not be nil"}
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	l, err := newLedger(drv, &o)
	if err != nil {
		return nil, err // bad options: nothing touched
	}
	if err := drv.Setup(ctx, driver.Config{Now: o.Clock, NoMigrate: o.NoMigrate, MaxBatch: o.MaxBatch}); err != nil {
		return nil, fmt.Errorf("idem: %w", err)
	}
	return l, nil
}

// newLedger checks opts and builds the ledger around drv.
func newLedger(drv driver.Driver, opts *Options) (*Ledger, error) {
	o := *opts
	l := &Ledger{
		drv:       drv,
		lease:     cmp.Or(o.Lease, DefaultLease),
		retention: cmp.Or(o.Retention, DefaultRetention),
		tombstone: cmp.Or(o.TombstoneTTL, DefaultTombstoneTTL),
		stale:     cmp.Or(o.Stale, StaleRedo),
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
	if l.stale == StaleReconcile && l.reconcile == nil {
		return nil, &InputError{Field: "stale", Reason: "policy StaleReconcile needs Options.Reconciler"}
	}
	return l, nil
}

// executor adapts the caller's transaction for the driver.
func (l *Ledger) executor(tx Tx) (driver.Executor, error) {
	if tx == nil {
		return nil, &InputError{Field: "tx", Reason: "must not be nil"}
	}
	ex, err := l.drv.Executor(tx)
	if err != nil {
		return nil, &InputError{Field: "tx", Reason: err.Error()}
	}
	return ex, nil
}

// DB returns a database/sql handle on the ledger's database: the
// application's *sql.DB on SQLite, a database/sql view of the pgx pool on
// PostgreSQL. Transactions begun on it can be handed to the ...Tx methods.
func (l *Ledger) DB() *sql.DB { return l.drv.DB() }

// Driver returns the driver the ledger runs on, for the packages built on
// the ledger (jobs, outbox, inbox) and for driver tests. Applications reach
// their database through their own handle or DB.
func (l *Ledger) Driver() driver.Driver { return l.drv }

// Close stops the ledger's background work (group commit) and closes the
// database handle if the driver owns it.
func (l *Ledger) Close() error { return l.drv.Close() }
