package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// JobQueue is one job queue, as the queues section shows it: paused or
// not (idem jobs pause), and its jobs by state.
type JobQueue struct {
	Name      string
	Paused    bool
	PausedAt  time.Time
	Available int
	Running   int
	Completed int
	Dead      int
	Cancelled int
}

// JobQueuesFunc lists the job queues, by name.
type JobQueuesFunc func(ctx context.Context) ([]JobQueue, error)

// LedgerJobQueues lists the job queues straight from the ledger's
// database, for Options.JobQueues where no jobs client runs (idem serve):
// every queue that has jobs or was ever paused. It only reads, and counts
// every job.
func LedgerJobQueues(l *idem.Ledger) JobQueuesFunc {
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return func(ctx context.Context) ([]JobQueue, error) {
		if err != nil {
			return nil, err
		}
		qs, err := c.Queues(ctx)
		if err != nil {
			return nil, fmt.Errorf("job queues: %w", err)
		}
		out := make([]JobQueue, len(qs))
		for i, q := range qs {
			out[i] = JobQueue{Name: q.Name, Paused: q.Paused, PausedAt: q.PausedAt,
				Available: q.Counts[idemtype.JobAvailable], Running: q.Counts[idemtype.JobRunning], Completed: q.Counts[idemtype.JobCompleted],
				Dead: q.Counts[idemtype.JobDead], Cancelled: q.Counts[idemtype.JobCancelled]}
		}
		return out, nil
	}
}

type queuesSection struct {
	Configured bool
	Items      []JobQueue
	Err        string
}
