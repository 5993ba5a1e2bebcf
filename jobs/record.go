package jobs

import (
	"time"

	"github.com/idemdev/idem/driver"
)

// State is where a job is in its life.
type State string

// Job states. A job waiting for its scheduled time or for a retry after
// backoff is Available with RunAt in the future.
const (
	StateAvailable State = State(driver.JobAvailable) // waiting to be claimed once RunAt has come
	StateRunning   State = State(driver.JobRunning)   // claimed by a worker under a lease
	StateCompleted State = State(driver.JobCompleted) // done; kept for Config.Retention
	StateDead      State = State(driver.JobDead)      // dead letter: out of attempts or failed permanently; kept until an operator acts
)

// Record is a job as stored, without typed arguments.
type Record struct {
	ID    int64
	Queue string
	Kind  string
	// Args are the encoded arguments: JSON, or Raw.Data as given.
	Args  []byte
	State State
	// Attempt counts claims, including the current one; it is also the
	// fencing token that every completion checks.
	Attempt     int
	MaxAttempts int
	// RunAt is when the job becomes (or became) claimable.
	RunAt     time.Time
	UniqueKey string
	// Errors lists failed attempts, oldest first, including leases that
	// expired because a worker died.
	Errors []AttemptError
	// Result is what the handler recorded with SetResult, once completed.
	Result []byte
	// ClaimedBy is the ID (Config.ID) of the client that claimed the job
	// last; empty until it is first claimed.
	ClaimedBy   string
	LeaseUntil  time.Time // zero unless running
	CreatedAt   time.Time
	AttemptedAt time.Time // zero until first claimed
	FinalizedAt time.Time // zero unless completed or dead
}

// AttemptError is one failed attempt.
type AttemptError struct {
	Attempt int
	At      time.Time
	Error   string
}

func recordFrom(r driver.JobRow) *Record {
	rec := &Record{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Args: r.Args, State: State(r.State),
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, RunAt: r.RunAt, UniqueKey: r.UniqueKey,
		Result: r.Result, ClaimedBy: r.Worker, LeaseUntil: r.LeaseUntil, CreatedAt: r.CreatedAt,
		AttemptedAt: r.AttemptedAt, FinalizedAt: r.FinalizedAt,
	}
	for _, e := range r.Errors {
		rec.Errors = append(rec.Errors, AttemptError(e))
	}
	return rec
}
