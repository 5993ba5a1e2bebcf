package driver

import (
	"context"

	"github.com/idemdev/idem/idemtype"
)

// JobQueues is what a database implements to pause and resume queues
// across every host.
type JobQueues interface {
	// PauseJobQueue pauses (paused true) or resumes a queue, creating its
	// row if needed, and returns it. A claim that begins after a pause has
	// committed takes none of the queue's jobs (ClaimJobs returns none)
	// until a resume; jobs already running are not touched. Pausing a
	// paused queue keeps its first PausedAt.
	PauseJobQueue(ctx context.Context, queue string, paused bool) (idemtype.JobQueue, error)
	// ListJobQueues returns every queue that has a row (was ever paused),
	// by name.
	ListJobQueues(ctx context.Context) ([]idemtype.JobQueue, error)
	// CountJobsByQueue counts every queue's jobs by state (a full scan:
	// for operators).
	CountJobsByQueue(ctx context.Context) (map[string]map[idemtype.JobState]int, error)
}

// ScanQueueCounts reads (queue, state, count) rows and closes rows.
func ScanQueueCounts(rows Rows) (map[string]map[idemtype.JobState]int, error) {
	defer rows.Close()
	out := map[string]map[idemtype.JobState]int{}
	for rows.Next() {
		var (
			q, s string
			n    int
		)
		if err := rows.Scan(&q, &s, &n); err != nil {
			return nil, err
		}
		if out[q] == nil {
			out[q] = map[idemtype.JobState]int{}
		}
		out[q][idemtype.JobState(s)] = n
	}
	return out, rows.Err()
}

// JobStateBits is the set of states as the unique_states column stores it.
func JobStateBits(states []idemtype.JobState) int {
	bits := 0
	for _, s := range states {
		switch s {
		case idemtype.JobAvailable:
			bits |= 1
		case idemtype.JobRunning:
			bits |= 2
		case idemtype.JobCompleted:
			bits |= 4
		case idemtype.JobDead:
			bits |= 8
		case idemtype.JobCancelled:
			bits |= 16
		}
	}
	return bits
}
