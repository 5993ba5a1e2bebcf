// Package driver is the seam between idem's logic and the databases it runs
// on. The ledger, jobs, outbox and inbox are written once against the
// interfaces here; the packages below (driver/sqlite, driver/postgres) hold
// every line of SQL.
//
// Users meet a driver only as a value made from their own database handle
// (postgres.New(pool), sqlite.New(db)) and handed to idem.New; they never
// call its methods. A driver written outside this module implements
// Driver and proves itself with driver/drivertest. The interfaces may
// still change between minor releases.
//
// Every method that writes is a single atomic step: it either happens
// entirely or not at all. A method that returns an error other than the
// sentinels below may or may not have been applied (the connection may have
// died during COMMIT); callers treat that as an unknown outcome and retry the
// same step with the same key, never a different one.
package driver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// Sentinel errors every driver returns unwrapped or wrapped.
var (
	// ErrNotFound means no record exists for the scope and key.
	ErrNotFound = errors.New("driver: record not found")
	// ErrFenced means a fenced write changed nothing: the attempt, lease id,
	// state or lease no longer match. Nothing was written.
	ErrFenced = errors.New("driver: fenced out")
	// ErrConflict means a compare-and-swap found the record changed since it
	// was read. Nothing was written; the caller reads again and re-decides.
	ErrConflict = errors.New("driver: record changed concurrently")
	// ErrOutcomeUnknown marks an error after which the write may or may
	// not have been applied: the connection broke after the statement or
	// its COMMIT was sent (a server that died, a failover, a network cut).
	// Drivers wrap the underlying error with it where they can tell; any
	// other non-sentinel error must be treated the same way (see the
	// package documentation).
	ErrOutcomeUnknown = errors.New("driver: outcome unknown (the connection was lost after the write was sent)")
)

// Config is what the ledger hands its driver at Setup.
type Config struct {
	// Now, when set, replaces the database clock. Tests use it to move time;
	// production leaves it nil so that every lease comes from one clock.
	Now func() time.Time
	// NoMigrate skips applying migrations at Setup.
	NoMigrate bool
	// MaxBatch bounds group commit: concurrent ledger writes that do not
	// join a caller's transaction (claims, takeovers, heartbeats, finishes)
	// are gathered, at most MaxBatch at a time, and committed in one
	// transaction; each caller is answered after that commit, with its own
	// result. 0 means the driver's measured default; -1 (or 1) commits every
	// write on its own.
	MaxBatch int
}

// ClaimParams asks for a new record, or for the existing one.
type ClaimParams struct {
	Scope, Key, Fingerprint string
	LeaseID                 int64
	Lease                   time.Duration
	Retention               time.Duration
	TombstoneTTL            time.Duration
}

// Created is the record a Claim inserted for p, built from what the insert
// computed (the lease's end and the statement's clock) instead of being
// read back.
func (p ClaimParams) Created(leaseUntil, now time.Time) idemtype.Record {
	return idemtype.Record{
		Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint, State: idemtype.StateInProgress,
		Attempt: 1, LeaseID: p.LeaseID, LeaseUntil: leaseUntil,
		Retention:    p.Retention.Truncate(time.Millisecond), // stored in milliseconds
		TombstoneTTL: p.TombstoneTTL.Truncate(time.Millisecond),
		CreatedAt:    now, UpdatedAt: now, Now: now,
	}
}

// TakeoverParams asks to take an existing record that is free to take: a
// released record, an in-progress record whose lease has ended, or a
// completed record past its tombstone window. It is a compare-and-swap on
// (State, Attempt): if the record changed, ErrConflict.
type TakeoverParams struct {
	ClaimParams
	FromState   idemtype.State
	FromAttempt int64
	// Park, when true, moves a stale in-progress record to parked (attempt
	// unchanged) instead of handing it to the caller.
	Park bool
}

// Fence identifies one holder of one claim. A fenced write acts only while
// the record is in progress with this attempt and lease id, and its lease
// has not ended.
type Fence struct {
	Scope, Key string
	Attempt    int64
	LeaseID    int64
}

// FinishParams ends a claim: succeeded or failed (with a stored result),
// released (no result, key free), or parked (outcome unknown).
type FinishParams struct {
	Fence
	State  idemtype.State
	Status int
	Meta   []byte
	Body   []byte
}

// ResolveParams is an operator's decision about a parked or stuck record.
type ResolveParams struct {
	Scope, Key string
	State      idemtype.State // succeeded, failed or released
	Status     int
	Meta       []byte
	Body       []byte
	// Force allows resolving an in-progress record whose lease is still live.
	Force bool
}

// Ledger is what a database must implement for the claim ledger. Methods
// that may join a caller's transaction take an Executor: Shared for the
// driver's own connections (writes group-committed), or one that
// Driver.Executor made from the caller's transaction.
type Ledger interface {
	// Claim inserts a new in-progress record with attempt 1, or returns the
	// existing one untouched. created says which. ErrConflict means the
	// existing row vanished between the two steps; the caller tries again.
	Claim(ctx context.Context, ex Executor, p ClaimParams) (rec idemtype.Record, created bool, err error)
	// Takeover hands a free record to a new holder with attempt+1, or parks
	// it. See TakeoverParams.
	Takeover(ctx context.Context, ex Executor, p TakeoverParams) (idemtype.Record, error)
	// Heartbeat extends a held lease to now+lease. ErrFenced if not held.
	Heartbeat(ctx context.Context, f Fence, lease time.Duration) (time.Time, error)
	// Finish ends a held claim; inside a caller's transaction the caller's
	// effect and the done mark commit together. ErrFenced if the claim is
	// no longer held; nothing is written then.
	Finish(ctx context.Context, ex Executor, p FinishParams) error
	// Get reads one record. ErrNotFound if there is none.
	Get(ctx context.Context, scope, key string) (idemtype.Record, error)
	// Resolve applies an operator's decision to a parked record, or to an
	// in-progress one whose lease ended (or any in-progress one with Force).
	// ErrFenced if the record is in another state or under a live lease.
	Resolve(ctx context.Context, p ResolveParams) (idemtype.Record, error)
	// Prune runs one bounded batch of the retention sweep. It never touches
	// an in-progress or parked record.
	Prune(ctx context.Context, limit int) (idemtype.PruneCounts, error)
	// List returns records for operators, most recently updated first.
	List(ctx context.Context, f idemtype.ListFilter) ([]idemtype.Record, error)
}

// PacedPruner is a Ledger whose prune batch paces itself: it works in
// short steps, each a transaction, and after each pauses so that it holds
// the database's writer at most duty (between 0.05 and 1) of the time,
// instead of the caller pausing between whole batches. A claim waits
// behind at most one step. Below duty 1 it also yields to live traffic
// (see Yield): a step waits for the writes to be idle a moment, down to a
// floor share under load that never leaves them idle. SQLite's driver is
// one: its batch would otherwise hold the one writer for the whole batch.
// PostgreSQL's is one whose step is its whole batch, one statement.
type PacedPruner interface {
	// PrunePaced is Prune in paced steps.
	PrunePaced(ctx context.Context, limit int, duty float64) (idemtype.PruneCounts, error)
}

// Vacuumer is a Ledger whose database keeps the space of deleted rows
// unusable until a separate pass marks it free (PostgreSQL: VACUUM, which
// autovacuum runs on its own schedule). Ledger.Prune with
// PruneOptions.Vacuum calls it after a sweep that changed rows, so that
// the next rows reuse that space rather than growing the table, even when
// sweeps come faster than autovacuum. SQLite's driver is not one: its
// sweep hands pages back as it goes.
type Vacuumer interface {
	// VacuumLedger marks the space of the ledger's deleted and rewritten
	// rows free for reuse, without locking out reads or writes. It fails,
	// doing nothing, when the database would skip the pass (the caller
	// lacks the right to vacuum the table).
	VacuumLedger(ctx context.Context) error
}

// DutyPause waits after a piece of work that held the database's writer
// for took, so that the writer is held at most duty (0 < duty <= 1) of
// the time: took×(1−duty)/duty, at most longest. It returns ctx's error if
// ctx ends first. Ledger.Prune pauses so between batches, a PacedPruner
// between its steps.
func DutyPause(ctx context.Context, took time.Duration, duty float64, longest time.Duration) error {
	if duty >= 1 {
		return nil
	}
	t := time.NewTimer(min(time.Duration(float64(took)*(1-duty)/duty), longest))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Driver is one database, made from the application's handle.
type Driver interface {
	Ledger
	Work  // jobs, outbox and inbox (driver/jobs.go)
	Steps // multi-step runs (driver/steps.go)
	// Name is "sqlite" or "postgres".
	Name() string
	// Setup readies the database for the ledger: it checks the connection
	// and the settings the driver depends on, applies the migrations
	// (unless cfg.NoMigrate) and starts group commit. idem.New calls it
	// before any other method; on a driver already set up it does nothing
	// (a ledger opened on a wrapped driver, say).
	Setup(ctx context.Context, cfg Config) error
	// Executor adapts a caller's open transaction (*sql.Tx; pgx.Tx on the
	// postgres driver) so that a method runs inside it. Any other type is
	// an error naming the types the driver takes.
	Executor(tx any) (Executor, error)
	// DB is a database/sql handle on the driver's database: the
	// application's pool, or a database/sql view of it.
	DB() *sql.DB
	// Begin begins a transaction for user code to write its effect in
	// (Do). end must be called once the transaction has been committed or
	// rolled back: on SQLite the transaction holds idem's writer until
	// then, and has held SQLite's write lock from its start.
	Begin(ctx context.Context) (tx *sql.Tx, end func(), err error)
	// Migrations lists the embedded schema, in order.
	Migrations() []Migration
	// Migrate applies every migration not yet applied and returns those.
	// Safe to run from several processes at once.
	Migrate(ctx context.Context) (applied []Migration, err error)
	// Close stops group commit. It closes the application's handle only
	// when the driver opened it itself (a URL-based open).
	Close() error
	// Secret returns the secret called name, storing fresh as its value
	// first if there is none yet; every caller gets the one stored first.
	Secret(ctx context.Context, name string, fresh []byte) ([]byte, error)
}

// Migration is one numbered, re-runnable schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}
