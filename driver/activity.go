package driver

import (
	"context"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// Activity is what a database implements so that an operator's page can
// show every gateway's numbers, not one process's: counters each process
// reports in the background, per-key replay counts, counts of records by
// state and the most recently updated records. Drivers that do not
// implement it leave the page with one process's numbers.
type Activity interface {
	// ReportActivity stores one process's report in one transaction: it
	// sets the source's cumulative counters (a counter not named is left
	// as it is) and adds each KeyReplays to its record's replay count. A
	// key without a record (pruned since) is skipped. A record another
	// transaction holds locked is not waited for (a report never blocks a
	// claim, nor deadlocks with one): it is returned in busy, for the next
	// report.
	ReportActivity(ctx context.Context, r ActivityReport) (busy []KeyReplays, err error)
	// ActivitySources returns every source's counters, by source then
	// name.
	ActivitySources(ctx context.Context) ([]SourceCounter, error)
	// CountStates counts records by state, each count stopping at limit
	// (limit <= 0: no limit); a count equal to limit means "at least".
	CountStates(ctx context.Context, limit int) (StateCounts, error)
	// RecentRecords returns the limit most recently updated records
	// (without their stored results), newest first, through the index on
	// updated_at.
	RecentRecords(ctx context.Context, limit int) ([]RecentRecord, error)
}

// ActivityReport is one process's report: its cumulative counters and the
// keys replayed since its last report.
type ActivityReport struct {
	// Source names the process: unique per process, stable for its life.
	Source   string
	Counters map[string]int64
	Replays  []KeyReplays
}

// KeyReplays is how many times one key was replayed since the last report,
// and when last.
type KeyReplays struct {
	Scope, Key string
	N          int64
	Last       time.Time
}

// SourceCounter is one counter of one source, as last reported.
type SourceCounter struct {
	Source, Name string
	Value        int64
	UpdatedAt    time.Time
}

// StateCounts counts records by state. Completed counts succeeded and
// failed records (one partial index holds both); Stale counts in-progress
// records whose lease has ended (they are in InProgress too). Total counts
// every row, tombstones included.
type StateCounts struct {
	Completed, InProgress, Stale, Parked, Released, Tombstone, Total int64
}

// RecentRecord is a record without its stored result, with how many times
// it was replayed (as reported through ReportActivity).
type RecentRecord struct {
	Scope, Key, Fingerprint string
	State                   idemtype.State
	Attempt                 int64
	Status                  int
	LeaseUntil, UpdatedAt   time.Time
	Replays                 int64
	LastReplayedAt          time.Time // zero if never
	Now                     time.Time // the database clock when read
}

// JobQueueAges is what a database implements to tell how long each
// queue's oldest due job has waited.
type JobQueueAges interface {
	// OldestAvailableJobAges returns, for every queue with an available
	// job that is due, how long ago the oldest of them became due
	// (database clock). It reads every due job: for operators.
	OldestAvailableJobAges(ctx context.Context) (map[string]time.Duration, error)
}
