package idem

import (
	"time"

	"github.com/idemdev/idem/driver"
)

// State is where a record is in its life. See docs/contract.md.
type State string

// Record states.
const (
	StateInProgress State = State(driver.StateInProgress) // claimed, under a lease
	StateSucceeded  State = State(driver.StateSucceeded)  // done; result stored and replayed
	StateFailed     State = State(driver.StateFailed)     // failed permanently; stored and replayed
	StateReleased   State = State(driver.StateReleased)   // given up; the next claim starts clean
	StateParked     State = State(driver.StateParked)     // outcome unknown; waits for an operator
	StateTombstone  State = State(driver.StateTombstone)  // past retention; result dropped, key still known
)

// Result is what a completed operation stored: a status (an HTTP status, or
// any small code), opaque metadata (the HTTP layer keeps headers there) and
// the body. Replayed is set by idem on results it returns from the ledger
// rather than from the caller's function; Complete ignores it.
type Result struct {
	Status   int
	Meta     []byte
	Body     []byte
	Replayed bool
}

// Record is one (scope, key) as stored in the ledger.
type Record struct {
	Scope       string
	Key         string
	Fingerprint string
	State       State
	// Attempt is the newest fencing token issued for the key.
	Attempt        int64
	LeaseUntil     time.Time
	Retention      time.Duration
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
	ExpiresAt      time.Time // end of retention (zero until completed)
	TombstoneUntil time.Time // end of the tombstone window (zero until completed)
	Result         Result
	// Now is the database clock when the record was read.
	Now time.Time
}

// Stale reports whether the record is in progress with its lease ended.
func (r Record) Stale() bool { return r.State == StateInProgress && !r.LeaseUntil.After(r.Now) }

func recordFrom(r driver.Record) Record {
	return Record{
		Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint, State: State(r.State),
		Attempt: r.Attempt, LeaseUntil: r.LeaseUntil, Retention: r.Retention,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt,
		ExpiresAt: r.ExpiresAt, TombstoneUntil: r.TombstoneUntil,
		Result: Result{Status: r.Status, Meta: r.Meta, Body: r.Body},
		Now:    r.Now,
	}
}
