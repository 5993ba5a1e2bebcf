package jobs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// Pause pauses queue on every host: the pause is a row in the database
// that every claim checks, so from the moment Pause returns no client, in
// any process, claims the queue's jobs until Resume. Enqueueing goes on;
// the jobs wait. Jobs already running when Pause returns are not touched:
// they run to completion (or failure, and their retries wait). Pausing a
// paused queue changes nothing. The queue need not be declared in
// Config.Queues, so an operator's client can pause any queue.
func (c *Client) Pause(ctx context.Context, queue string) (*idemtype.JobQueue, error) {
	return c.pause(ctx, queue, true)
}

// Resume resumes a paused queue on every host: claims take its due jobs
// again (at once where the database notifies, else within
// Config.PollInterval). Resuming a queue that is not paused changes
// nothing.
func (c *Client) Resume(ctx context.Context, queue string) (*idemtype.JobQueue, error) {
	return c.pause(ctx, queue, false)
}

func (c *Client) pause(ctx context.Context, queue string, paused bool) (*idemtype.JobQueue, error) {
	if err := checkQueueName(queue); err != nil {
		return nil, err
	}
	q, err := c.drv.PauseJobQueue(ctx, queue, paused)
	if err != nil {
		verb := "resume"
		if paused {
			verb = "pause"
		}
		return nil, fmt.Errorf("jobs: %s queue %s: %w", verb, queue, err)
	}
	if !paused {
		c.announce(ctx, driver.Shared, []string{queue}) // never fails outside a transaction
	}
	return &q, nil
}

// QueueInfo is one queue as operators see it: whether it is paused, its
// jobs by state, and how long its oldest due job has waited.
type QueueInfo struct {
	idemtype.JobQueue
	Counts map[idemtype.JobState]int
	// OldestAvailable is how long ago the oldest available job that is due
	// became due (by the database's clock); zero when none is waiting, or
	// the driver does not tell (driver.JobQueueAges).
	OldestAvailable time.Duration
}

// Queues returns every queue that has jobs or was ever paused, by name,
// with whether it is paused now, its jobs by state and the age of its
// oldest due job. It counts every job: for operators, not for a hot path.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	qs, err := c.drv.ListJobQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobs: list queues: %w", err)
	}
	counts, err := c.drv.CountJobsByQueue(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobs: list queues: %w", err)
	}
	byName := map[string]*QueueInfo{}
	for _, q := range qs {
		byName[q.Name] = &QueueInfo{JobQueue: q}
	}
	for name, m := range counts {
		if byName[name] == nil {
			byName[name] = &QueueInfo{JobQueue: idemtype.JobQueue{Name: name}}
		}
		byName[name].Counts = m
	}
	if ag, ok := c.drv.(driver.JobQueueAges); ok {
		ages, err := ag.OldestAvailableJobAges(ctx)
		if err != nil {
			return nil, fmt.Errorf("jobs: list queues: %w", err)
		}
		for name, age := range ages {
			if q := byName[name]; q != nil {
				q.OldestAvailable = age
			}
		}
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		q := byName[name]
		if q.Counts == nil {
			q.Counts = map[idemtype.JobState]int{}
		}
		out = append(out, *q)
	}
	return out, nil
}
