// Package idemtype holds the types that idem's packages and its database
// drivers share: the ledger record, its states, and the filters and counts
// operators use. It is a leaf package (it imports nothing of idem's), so a
// driver written outside this module can depend on it without depending on
// the ledger, and no value is ever converted between a "driver" and a
// "public" twin of the same type.
package idemtype

import "time"

// State is where a record is in its life. See docs/contract.md.
type State string

// Record states. Released is the stored form of "no claim": the key is
// free, but the row stays so that the fencing token keeps growing.
const (
	StateInProgress State = "in_progress" // claimed, under a lease
	StateSucceeded  State = "succeeded"   // done; result stored and replayed
	StateFailed     State = "failed"      // failed permanently; stored and replayed
	StateReleased   State = "released"    // given up; the next claim starts clean
	StateParked     State = "parked"      // outcome unknown; waits for an operator
	StateTombstone  State = "tombstone"   // past retention; result dropped, key still known
)

// Record is one (scope, key) of the ledger, as stored.
type Record struct {
	Scope       string
	Key         string
	Fingerprint string
	State       State
	// Attempt is the fencing token: it grows by one with every claim that
	// takes the key (acquire after release, reclaim) and never goes back.
	Attempt int64
	// LeaseID is a random number drawn by each claim. Fenced writes check
	// it together with Attempt, so a token can never be confused with one
	// issued for an earlier incarnation of a pruned row.
	LeaseID        int64
	LeaseUntil     time.Time
	Retention      time.Duration
	TombstoneTTL   time.Duration
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time // zero until succeeded or failed
	ExpiresAt      time.Time // end of retention; zero until succeeded or failed
	TombstoneUntil time.Time // end of the tombstone window; zero until succeeded or failed
	// Status, Meta and Body are the stored result: a status (an HTTP
	// status, or any small code), opaque metadata (the HTTP layer keeps
	// headers there) and the body.
	Status int
	Meta   []byte
	Body   []byte
	// Now is the database clock at the statement that read the record. All
	// lease and retention decisions compare against it, never a worker's
	// clock.
	Now time.Time
}

// Stale reports whether the record is in progress with its lease ended.
func (r Record) Stale() bool { return r.State == StateInProgress && !r.LeaseUntil.After(r.Now) }

// ListFilter selects records for operators. Zero values match everything.
type ListFilter struct {
	State State
	// Stale selects in-progress records whose lease has ended.
	Stale bool
	Scope string
	// Key selects one key (in any scope, unless Scope is set too).
	Key   string
	Limit int // default 100
}

// PruneCounts counts what a prune changed, or would change.
type PruneCounts struct {
	Tombstoned int // completed records past retention whose result was dropped
	Deleted    int // tombstones past their window, and long-released rows
}

// OpenCounts is how many records need watching, by the database clock.
type OpenCounts struct {
	InProgress int64 // in progress, live or stale
	Stale      int64 // in progress with the lease ended (a subset of InProgress)
	Parked     int64 // waiting for an operator or a reconciler
}
