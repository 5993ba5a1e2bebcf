package idemtype

import "time"

// JobState is where a job is in its life, as stored.
type JobState string

// The states a job can be in. A job waiting for its first run, for a retry
// after backoff, or for its scheduled time is available with a RunAt in the
// future; there is no separate scheduled state to move jobs through.
const (
	JobAvailable JobState = "available" // waiting to be claimed once RunAt has come
	JobRunning   JobState = "running"   // claimed by a worker under a lease
	JobCompleted JobState = "completed" // done; kept until pruned
	JobDead      JobState = "dead"      // dead letter: out of attempts or failed permanently; kept until an operator acts
	JobCancelled JobState = "cancelled" // cancelled by Cancel: never runs (again); kept until pruned like a completed job
)

// JobStates lists every state, in the order of a job's life.
var JobStates = []JobState{JobAvailable, JobRunning, JobCompleted, JobDead, JobCancelled}

// Final reports whether s is a state a job never leaves on its own:
// completed, dead or cancelled.
func (s JobState) Final() bool {
	return s == JobCompleted || s == JobDead || s == JobCancelled
}

// Job priorities: 1 is the highest and the default, 4 the lowest (as in
// River). Within a queue, a claim takes due jobs by priority, then RunAt,
// then ID.
const (
	JobPriorityHighest = 1
	JobPriorityLowest  = 4
)

// JobRow is a job as stored, with its arguments encoded.
type JobRow struct {
	ID    int64
	Queue string
	Kind  string
	// Args are the encoded arguments: JSON, or jobs.Raw's data as given.
	Args  []byte
	State JobState
	// Priority is 1 (highest, the default) … 4 (lowest).
	Priority int
	// Attempt counts claims, including the current one; it is also the
	// fencing token that every completion checks, and never goes back.
	Attempt     int
	MaxAttempts int
	// LeaseID is drawn at random by each claim; fenced writes check it
	// with Attempt.
	LeaseID    int64
	LeaseUntil time.Time // zero unless running
	// ClaimedBy is the ID (jobs.Config.ID) of the client that claimed the
	// job last; empty until it is first claimed, kept after the run.
	ClaimedBy string
	RunAt     time.Time // when the job becomes (or became) claimable
	UniqueKey string
	// Errors lists failed attempts, oldest first, including leases that
	// expired because a worker died.
	Errors []JobError
	// Result is what the handler recorded, once completed.
	Result      []byte
	CreatedAt   time.Time
	UpdatedAt   time.Time
	AttemptedAt time.Time // zero until first claimed
	FinalizedAt time.Time // zero unless completed, dead or cancelled
	// Now is the database clock at the statement that read the row.
	Now time.Time
	// Metadata is the JSON object given at enqueue (jobs.EnqueueOpts.Metadata),
	// nil if none.
	Metadata []byte
	// PartitionKey groups the job for a per-partition concurrency limit;
	// empty if none.
	PartitionKey string
}

// JobError is one failed attempt, as recorded on the job.
type JobError struct {
	Attempt int
	At      time.Time
	Error   string
}
