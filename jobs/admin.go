package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// Get reads one job. ErrNotFound if there is none.
func (c *Client) Get(ctx context.Context, id int64) (*idemtype.JobRow, error) {
	r, err := c.drv.GetJob(ctx, id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("jobs: job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: get job %d: %w", id, err)
	}
	return &r, nil
}

// ListParams selects jobs for List. Zero values match everything.
type ListParams struct {
	Queue string
	State idemtype.JobState
	Kind  string
	// KeyPrefix selects jobs whose unique key starts with it.
	KeyPrefix string
	// AfterID pages through results: pass the last ID of the previous page.
	AfterID int64
	// Limit defaults to 100.
	Limit int
}

// List returns jobs in id order; for operators inspecting dead letters and
// for the outbox's status.
func (c *Client) List(ctx context.Context, p *ListParams) ([]*idemtype.JobRow, error) {
	f := driver.JobFilter{}
	if p != nil {
		f = driver.JobFilter{Queue: p.Queue, State: idemtype.JobState(p.State), Kind: p.Kind, KeyPrefix: p.KeyPrefix, AfterID: p.AfterID, Limit: p.Limit}
	}
	rows, err := c.drv.ListJobs(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("jobs: list: %w", err)
	}
	out := make([]*idemtype.JobRow, len(rows))
	for i, r := range rows {
		out[i] = &r
	}
	return out, nil
}

// Counts counts the jobs of queue (every queue if empty) by state.
func (c *Client) Counts(ctx context.Context, queue string) (map[idemtype.JobState]int, error) {
	m, err := c.drv.CountJobs(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("jobs: count: %w", err)
	}
	out := make(map[idemtype.JobState]int, len(m))
	for s, n := range m {
		out[idemtype.JobState(s)] = n
	}
	return out, nil
}

// Requeue makes a dead job available now, with Config.MaxAttempts more
// attempts. Its errors are kept. ErrWrongState if the job is not dead.
func (c *Client) Requeue(ctx context.Context, id int64) (*idemtype.JobRow, error) {
	r, err := c.drv.RequeueJob(ctx, id, c.cfg.MaxAttempts)
	if err != nil {
		return nil, c.adminErr("requeue", id, err)
	}
	c.cfg.Metrics.JobTransition(r.Queue, TransitionDead, TransitionAvailable)
	c.announce(ctx, driver.Shared, []string{r.Queue}) // never fails outside a transaction
	return &r, nil
}

// Discard deletes a dead job: the operator's decision that it will never
// run. ErrWrongState if the job is not dead.
func (c *Client) Discard(ctx context.Context, id int64) error {
	if err := c.drv.DeleteJob(ctx, id, []idemtype.JobState{idemtype.JobDead}); err != nil {
		return c.adminErr("discard", id, err)
	}
	return nil
}

// Delete deletes a job in any state: Discard without its guard, for an
// operator who wants a job gone before it runs, or its unique key freed.
// A worker running the job keeps running; its heartbeat and completion
// find no claim (ErrLeaseLost), its context is cancelled, and nothing is
// recorded. Effects it made outside its CompleteTx transaction stay made.
func (c *Client) Delete(ctx context.Context, id int64) error {
	if err := c.drv.DeleteJob(ctx, id, idemtype.JobStates); err != nil {
		return c.adminErr("delete", id, err)
	}
	return nil
}

// Cancel makes a job cancelled, a final state: it will never run, or run
// again. It returns the job as cancelled.
//
//   - An available job (due, scheduled, or waiting for a retry) is never
//     claimed.
//   - A running job's claim ends at once: from the moment Cancel returns,
//     its completion (CompleteTx, or Work returning nil) and every other
//     write of its worker are refused, so nothing the worker commits
//     through CompleteTx's transaction takes effect, and the job is never
//     retried. The worker's next heartbeat (within Config.Lease/3) cancels
//     its context with cause ErrCancelled. What the handler already did
//     outside that transaction (an HTTP call) stays done: Cancel cannot
//     take it back.
//   - Cancel and a completion race to one fenced write: exactly one wins.
//     If the completion committed first, Cancel returns ErrWrongState and
//     the job stays completed.
//   - A completed or dead job is refused with ErrWrongState; a job
//     already cancelled is returned as it is.
//
// A cancelled job keeps its unique key until it is pruned, after
// Config.Retention like a completed job; Delete removes it sooner.
func (c *Client) Cancel(ctx context.Context, id int64) (*idemtype.JobRow, error) {
	r, from, err := c.drv.CancelJob(ctx, id)
	if err != nil {
		if errors.Is(err, driver.ErrConflict) {
			return nil, fmt.Errorf("jobs: cancel job %d: %w (it is %s; only available and running jobs can be cancelled)", id, ErrWrongState, r.State)
		}
		return nil, c.adminErr("cancel", id, err)
	}
	if from != "" {
		c.cfg.Metrics.JobTransition(r.Queue, string(from), TransitionCancelled)
	}
	if from == idemtype.JobAvailable { // a running job's event comes from its worker's client
		c.emitRow(EventCancelled, r, 0)
	}
	return &r, nil
}

func (c *Client) adminErr(op string, id int64, err error) error {
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return fmt.Errorf("jobs: %s job %d: %w", op, id, ErrNotFound)
	case errors.Is(err, driver.ErrConflict):
		return fmt.Errorf("jobs: %s job %d: %w (only dead jobs)", op, id, ErrWrongState)
	}
	return fmt.Errorf("jobs: %s job %d: %w", op, id, err)
}
