package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// Work is what the jobs, outbox and inbox packages need from a database,
// beyond the ledger. The outbox is built on jobs and needs nothing of its
// own.
type Work interface {
	Jobs
	JobQueues
	Inbox
}

// JobInsert is one job to enqueue.
type JobInsert struct {
	Queue, Kind string
	Args        []byte
	// UniqueKey, when not empty, makes the insert a no-op if a job with the
	// same (Queue, UniqueKey) exists in any state; the existing job is
	// returned instead.
	UniqueKey string
	// UniqueAcrossQueues makes UniqueKey hold across every queue: the
	// insert is a no-op if a job with the same UniqueKey, inserted with
	// UniqueAcrossQueues too, exists on any queue. Keys across queues and
	// keys per queue never collide with each other.
	UniqueAcrossQueues bool
	// UniqueStates, when not zero, is the set of states (JobStateBits) in
	// which UniqueKey holds: the job loses its key for good once it moves
	// to a state outside the set. Zero means every state.
	UniqueStates int
	MaxAttempts  int
	// Priority is idemtype.JobPriorityHighest … idemtype.JobPriorityLowest.
	Priority int
	// RunAt, when not zero, is when the job becomes claimable (the caller's
	// clock). Otherwise the job is claimable at the database's now + Delay.
	RunAt time.Time
	Delay time.Duration
	// Metadata is a JSON object, or nil.
	Metadata []byte
	// PartitionKey, when not empty, is what a per-partition concurrency
	// limit counts the job under.
	PartitionKey string
}

// UniqueScope is the part of a group-commit key that says where j's unique
// key holds: the queue, or nothing across queues (a queue name is never
// empty).
func UniqueScope(j JobInsert) string {
	if j.UniqueAcrossQueues {
		return "\x00"
	}
	return j.Queue + "\x00"
}

// UniqueScopeName says where j's unique key holds, for errors.
func UniqueScopeName(j JobInsert) string {
	if j.UniqueAcrossQueues {
		return "across queues"
	}
	return "of queue " + strconv.Quote(j.Queue)
}

// DecodeJobErrors parses the errors column, which both drivers store as a
// JSON array of {"attempt": n, "at": unix_ms, "error": "..."}.
func DecodeJobErrors(b []byte) ([]idemtype.JobError, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var raw []struct {
		Attempt int    `json:"attempt"`
		At      int64  `json:"at"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("job errors: %w", err)
	}
	out := make([]idemtype.JobError, len(raw))
	for i, e := range raw {
		out[i] = idemtype.JobError{Attempt: e.Attempt, At: time.UnixMilli(e.At), Error: e.Error}
	}
	return out, nil
}

// JobFence identifies one claim of one job. A fenced write acts only while
// the job is running with this attempt and lease id and its lease has not
// ended; otherwise it returns ErrFenced and writes nothing.
type JobFence struct {
	ID      int64
	Attempt int
	LeaseID int64
}

// ClaimJobsParams asks for up to Limit due jobs of one queue.
type ClaimJobsParams struct {
	Queue  string
	Worker string
	Limit  int
	// LeaseID is stamped on every job of the batch.
	LeaseID int64
	Lease   time.Duration
	// RescueLimit bounds how many expired running jobs of the queue the
	// same transaction hands back (available, or dead when out of
	// attempts). Zero skips the rescue.
	RescueLimit int
	// Concurrency, when positive, bounds the queue's running jobs with a
	// live lease (lease_until after the claim's clock) across every
	// claimer: the claim takes no more than Concurrency minus that count.
	// With PerPartition the bound holds per partition key instead (jobs
	// without one share the empty key). Claims of a limited queue are
	// serialized (an advisory lock on PostgreSQL, the write lock on
	// SQLite), so two claimers never both see the same free slot.
	Concurrency  int
	PerPartition bool
	// Rate, when positive, bounds the claims of the queue to Rate per
	// window of RateInterval: windows are aligned to the database epoch
	// (window n spans [n, n+1) × RateInterval) and counted in the
	// idem_job_rates row of the queue, in the claim's transaction.
	Rate         int
	RateInterval time.Duration
}

// FinishJobParams ends a claim. State is idemtype.JobCompleted (Result stored),
// idemtype.JobAvailable (a retry, claimable after Delay, or a release with Delay 0),
// or idemtype.JobDead. Error, when not empty, is appended to the job's errors.
type FinishJobParams struct {
	JobFence
	State  idemtype.JobState
	Result []byte
	Error  string
	Delay  time.Duration
	// Snooze, with State idemtype.JobAvailable, gives the attempt back: the
	// job's max_attempts grows by one (the attempt itself is the fencing
	// token and never goes back).
	Snooze bool
}

// Plain reports whether p completes a job without a result, an error or a
// snooze: the most common end, which drivers may write with a statement of
// its own that has nothing to choose per row.
func (p FinishJobParams) Plain() bool {
	return p.State == idemtype.JobCompleted && p.Result == nil && p.Error == "" && !p.Snooze
}

// JobFilter selects jobs for operators. Zero values match everything.
type JobFilter struct {
	Queue string
	State idemtype.JobState
	Kind  string
	// KeyPrefix selects jobs whose unique key starts with it.
	KeyPrefix string
	// AfterID pages: only jobs with a larger id.
	AfterID int64
	Limit   int // default 100
}

// Jobs is what a database implements for the leased job queue. Every write
// is one short transaction (or one statement); none is held open while a
// job runs.
type Jobs interface {
	// EnqueueJobs inserts jobs in order. dup[i] reports that jobs[i] had a
	// unique key already taken, in which case rows[i] is the existing job.
	// With a non-nil q it runs inside the caller's transaction; otherwise a
	// batch is inserted in one transaction of its own.
	EnqueueJobs(ctx context.Context, ex Executor, jobs []JobInsert) (rows []idemtype.JobRow, dup []bool, err error)
	// NotifyJobs tells listening workers that the queues have new jobs; in
	// the caller's transaction, the notice is sent when it commits. A no-op
	// where the database cannot notify.
	NotifyJobs(ctx context.Context, ex Executor, queues []string) error
	// ListenJobs calls ready once it is listening, then wake with a queue
	// name for each notice, until ctx ends or the connection fails. It
	// returns errors.ErrUnsupported at once where the database cannot
	// notify; workers then poll.
	ListenJobs(ctx context.Context, ready func(), wake func(queue string)) error
	// ClaimJobs claims up to Limit available jobs of the queue whose run_at
	// has come, by priority (1 first), then run_at, then id: each becomes running with attempt+1, the
	// batch's lease id and a lease from the database clock. In the same
	// short transaction it rescues expired running jobs of the queue (see
	// ClaimJobsParams.RescueLimit); a rescued job is claimable from the next
	// claim on. On PostgreSQL the claim skips rows another claimer has
	// locked.
	ClaimJobs(ctx context.Context, p ClaimJobsParams) ([]idemtype.JobRow, error)
	// HeartbeatJob extends a held lease to now+lease. ErrFenced if the claim
	// is no longer held.
	HeartbeatJob(ctx context.Context, f JobFence, lease time.Duration) (time.Time, error)
	// FinishJob ends a held claim, inside the caller's transaction when q is
	// not nil. ErrFenced if the claim is no longer held; nothing is written.
	FinishJob(ctx context.Context, ex Executor, p FinishJobParams) error
	// FinishJobs ends many claims in one transaction (group commit), each
	// fenced on its own: fenced[i] reports that ps[i] changed nothing. An
	// error means none, some or all may have been applied.
	FinishJobs(ctx context.Context, ps []FinishJobParams) (fenced []bool, err error)
	// GetJob reads one job. ErrNotFound if there is none.
	GetJob(ctx context.Context, id int64) (idemtype.JobRow, error)
	// ListJobs returns jobs matching f, by id.
	ListJobs(ctx context.Context, f JobFilter) ([]idemtype.JobRow, error)
	// CountJobs counts the jobs of a queue (all queues if empty) by state.
	CountJobs(ctx context.Context, queue string) (map[idemtype.JobState]int, error)
	// RequeueJob makes a dead job available now, with attempts more
	// attempts beyond the ones it used. ErrNotFound if there is no such job;
	// ErrConflict if it is not dead.
	RequeueJob(ctx context.Context, id int64, attempts int) (idemtype.JobRow, error)
	// CancelJob makes an available or running job cancelled (final, with
	// finalized_at set) in one statement, and returns it. A running job's
	// claim ends with it: every fenced write of its holder (heartbeat,
	// completion) then returns ErrFenced. A job already cancelled is
	// returned as it is, with an empty from. ErrNotFound if there is no
	// such job; ErrConflict if it is completed or dead. from is the state
	// the job was cancelled in: available or running.
	CancelJob(ctx context.Context, id int64) (row idemtype.JobRow, from idemtype.JobState, err error)
	// DeleteJob deletes a job in one of states. ErrNotFound if there is no
	// such job; ErrConflict if it is in another state.
	DeleteJob(ctx context.Context, id int64, states []idemtype.JobState) error
	// PruneJobs deletes up to limit completed or cancelled jobs finalized at
	// least olderThan ago. It never touches available, running or dead jobs.
	PruneJobs(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	// InsertJobsFast inserts jobs without unique keys (it refuses any) in
	// one transaction of its own, all or none, and returns their ids in
	// input order: COPY on PostgreSQL, multi-row INSERTs on SQLite.
	InsertJobsFast(ctx context.Context, jobs []JobInsert) ([]int64, error)
}

// JobFinishClaimer is implemented by drivers that can end claims and make
// the next claim in one transaction: FinishJobs then ClaimJobs, one commit
// for both. A worker that finishes a batch of jobs and claims the next
// batch then commits once per batch instead of twice. fenced is as
// FinishJobs reports it; claimed as ClaimJobs returns it. An error means
// neither the ends nor the claim may be trusted to have happened (none,
// some or all of the ends may have been applied; claimed jobs, if the
// commit happened, are rescued when their lease ends).
type JobFinishClaimer interface {
	FinishAndClaimJobs(ctx context.Context, ends []FinishJobParams, claim ClaimJobsParams) (fenced []bool, claimed []idemtype.JobRow, err error)
}

// ScanJobCounts reads (state, count) rows, as both drivers' CountJobs
// queries return them, and closes rows.
func ScanJobCounts(rows Rows) (map[idemtype.JobState]int, error) {
	defer rows.Close()
	out := map[idemtype.JobState]int{}
	for rows.Next() {
		var (
			s string
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[idemtype.JobState(s)] = n
	}
	return out, rows.Err()
}
