package jobs

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
)

// EnqueueManyFast inserts a batch in one transaction of its own, all or
// none, and returns only the new jobs' ids, in the order of params: COPY
// on PostgreSQL, multi-row INSERTs on SQLite. It is for large batches
// (thousands of jobs): it reads nothing back and fires no unique-key
// checks, so it refuses a job with a UniqueKey (use EnqueueMany, which
// can report the existing job of a taken key). Every other option applies
// as in Enqueue. If it returns an error other than a bad-input one, the
// batch may or may not have been inserted.
func (c *Client) EnqueueManyFast(ctx context.Context, params []EnqueueParams) ([]int64, error) {
	if len(params) == 0 {
		return nil, nil
	}
	ins := make([]driver.JobInsert, len(params))
	queues := map[string]bool{}
	for i, p := range params {
		j, err := c.prepare(p)
		if err == nil && j.UniqueKey != "" {
			err = inputErr("unique key", "EnqueueManyFast cannot check unique keys; use EnqueueMany")
		}
		if err != nil {
			return nil, fmt.Errorf("jobs: batch job %d: %w", i, err)
		}
		ins[i] = j
		if j.RunAt.IsZero() && j.Delay == 0 {
			queues[j.Queue] = true
		}
	}
	ids, err := c.drv.InsertJobsFast(ctx, ins)
	if err != nil {
		return nil, fmt.Errorf("jobs: enqueue fast: %w", err)
	}
	due := make([]string, 0, len(queues))
	for _, j := range ins {
		c.cfg.Metrics.JobTransition(j.Queue, TransitionNone, TransitionAvailable)
		if queues[j.Queue] {
			due = append(due, j.Queue)
			delete(queues, j.Queue)
		}
	}
	if err := c.announce(ctx, driver.Shared, due); err != nil {
		return nil, fmt.Errorf("jobs: enqueue fast: %w", err)
	}
	return ids, nil
}
