// Package driver is the seam between idem's logic and the databases it runs
// on. The ledger, jobs, outbox and inbox are written once against the
// interfaces here; the packages below (driver/sqlite, driver/postgres) hold
// every line of SQL.
//
// This package is internal-stable only: it may change in any release. Users
// open a ledger with idem.Open and never call a driver directly.
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
)

// State is the lifecycle state of a ledger record, as stored.
type State string

// The states a record can be in. "Released" is the stored form of the
// design's "(none)": the key is free, but the row stays so that the fencing
// token keeps growing.
const (
	StateInProgress State = "in_progress"
	StateSucceeded  State = "succeeded"
	StateFailed     State = "failed"
	StateReleased   State = "released"
	StateParked     State = "parked"
	StateTombstone  State = "tombstone"
)

// Record is one row of the ledger: one (scope, key).
type Record struct {
	Scope       string
	Key         string
	Fingerprint string
	State       State
	// Attempt is the fencing token: it grows by one with every claim that
	// takes the key (acquire after release, reclaim) and never goes back.
	Attempt int64
	// LeaseID is a random number drawn by each claim. Fenced writes check it
	// together with Attempt, so a token can never be confused with one issued
	// for an earlier incarnation of a pruned row.
	LeaseID        int64
	LeaseUntil     time.Time
	Retention      time.Duration
	TombstoneTTL   time.Duration
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time // zero until succeeded or failed
	ExpiresAt      time.Time // end of retention; zero until succeeded or failed
	TombstoneUntil time.Time // zero until succeeded or failed
	Status         int
	Meta           []byte
	Body           []byte
	// Now is the database clock at the statement that read the record. All
	// lease and retention decisions compare against it, never a worker clock.
	Now time.Time
}

// Querier is what *sql.DB and *sql.Tx have in common. Methods that accept a
// Querier run inside the caller's transaction when given one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Config is what the ledger hands every driver.
type Config struct {
	// Now, when set, replaces the database clock. Tests use it to move time;
	// production leaves it nil so that every lease comes from one clock.
	Now func() time.Time
	// NoMigrate skips applying migrations on open.
	NoMigrate bool
	// SyncNormal lowers SQLite's durability from synchronous=FULL to NORMAL:
	// a killed process loses nothing, a power cut may lose recent commits.
	SyncNormal bool
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
func (p ClaimParams) Created(leaseUntil, now time.Time) Record {
	return Record{
		Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint, State: StateInProgress,
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
	FromState   State
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
	State  State
	Status int
	Meta   []byte
	Body   []byte
}

// ResolveParams is an operator's decision about a parked or stuck record.
type ResolveParams struct {
	Scope, Key string
	State      State // succeeded, failed or released
	Status     int
	Meta       []byte
	Body       []byte
	// Force allows resolving an in-progress record whose lease is still live.
	Force bool
}

// PruneResult counts what one prune batch changed.
type PruneResult struct {
	Tombstoned int // completed records past retention whose result was dropped
	Deleted    int // tombstones past their window, and long-released rows
}

// ListFilter selects records for operators. Zero values match everything.
type ListFilter struct {
	State State
	// Stale selects in-progress records whose lease has ended.
	Stale bool
	Scope string
	Limit int
}

// Ledger is what a database must implement for the claim ledger.
type Ledger interface {
	// Claim inserts a new in-progress record with attempt 1, or returns the
	// existing one untouched. created says which. ErrConflict means the
	// existing row vanished between the two steps; the caller tries again.
	// With a non-nil q it runs inside the caller's transaction.
	Claim(ctx context.Context, q Querier, p ClaimParams) (rec Record, created bool, err error)
	// Takeover hands a free record to a new holder with attempt+1, or parks
	// it. See TakeoverParams. With a non-nil q it runs inside the caller's
	// transaction.
	Takeover(ctx context.Context, q Querier, p TakeoverParams) (Record, error)
	// Heartbeat extends a held lease to now+lease. ErrFenced if not held.
	Heartbeat(ctx context.Context, f Fence, lease time.Duration) (time.Time, error)
	// Finish ends a held claim. With a non-nil q it runs inside the caller's
	// transaction, so the caller's effect and the done mark commit together.
	// ErrFenced if the claim is no longer held; nothing is written then.
	Finish(ctx context.Context, q Querier, p FinishParams) error
	// Get reads one record. ErrNotFound if there is none.
	Get(ctx context.Context, scope, key string) (Record, error)
	// Resolve applies an operator's decision to a parked record, or to an
	// in-progress one whose lease ended (or any in-progress one with Force).
	// ErrFenced if the record is in another state or under a live lease.
	Resolve(ctx context.Context, p ResolveParams) (Record, error)
	// Prune runs one bounded batch of the retention sweep. It never touches
	// an in-progress or parked record.
	Prune(ctx context.Context, limit int) (PruneResult, error)
	// List returns records for operators, most recently updated first.
	List(ctx context.Context, f ListFilter) ([]Record, error)
}

// Driver is one open database.
type Driver interface {
	Ledger
	Work // jobs, outbox and inbox (driver/jobs.go)
	// Name is "sqlite" or "postgres".
	Name() string
	// DB is the pool that user transactions run on (Do, CompleteTx). On
	// SQLite it is the single writer connection.
	DB() *sql.DB
	// Migrations lists the embedded schema, in order.
	Migrations() []Migration
	// Migrate applies every migration not yet applied. Safe to run from
	// several processes at once.
	Migrate(ctx context.Context) error
	// Close releases the pools.
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
