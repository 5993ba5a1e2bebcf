package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// EnqueueOpts are per-job options. A nil *EnqueueOpts means defaults.
type EnqueueOpts struct {
	// Queue is the queue to put the job on; it must be declared in
	// Config.Queues. Default "default".
	Queue string
	// UniqueKey, when set, makes a second enqueue with the same key on the
	// same queue a no-op that returns the first job (Duplicate true), for as
	// long as the first job exists: waiting, running, completed or
	// cancelled (until pruned after Config.Retention) or dead. At most 255
	// bytes.
	UniqueKey string
	// RunAt schedules the job for a time by this host's clock. Zero means
	// now (plus Delay).
	RunAt time.Time
	// Delay schedules the job that long after the database's now. Must not
	// be negative, nor set together with RunAt.
	Delay time.Duration
	// MaxAttempts overrides Config.MaxAttempts for this job.
	MaxAttempts int
	// Unique, when set, builds the unique key from UniqueKey, the kind,
	// the arguments and the period, limits the states it holds in, makes
	// it hold across queues if asked, and chooses what a duplicate gets.
	// See UniqueOpts.
	Unique *UniqueOpts
	// Priority orders the job within its queue: 1 is the highest, 4 the
	// lowest (River's scale). Zero means 1. A claim takes the due jobs of
	// the highest priority first, then the oldest RunAt, then the lowest
	// ID; a low-priority job waits as long as higher ones keep coming.
	Priority int
	// Metadata is a JSON object stored with the job (idemtype.JobRow.Metadata)
	// for operators and tools: it is shown by `idem jobs show` and List, and
	// does not reach the worker's Args. At most 64 KiB.
	Metadata json.RawMessage
	// PartitionKey is what a per-partition concurrency limit
	// (Limits.PerPartition) counts the job under; derive it from the args
	// (a tenant or customer id, say). At most 255 bytes.
	PartitionKey string
}

// EnqueueParams is one job of a batch.
type EnqueueParams struct {
	Args Args
	Opts *EnqueueOpts
}

// EnqueueResult is what an enqueue did.
type EnqueueResult struct {
	// Job is the job inserted, or, when Duplicate, the existing job holding
	// the unique key.
	Job *idemtype.JobRow
	// Duplicate reports that nothing was inserted because the unique key
	// was taken.
	Duplicate bool
}

// Enqueue inserts one job in its own short write. If it returns an error
// other than a bad-input one, the job may or may not have been inserted:
// retry with the same UniqueKey to find out without inserting twice.
func (c *Client) Enqueue(ctx context.Context, args Args, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.enqueue(ctx, driver.Shared, []EnqueueParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return &res[0], nil
}

// EnqueueTx inserts one job inside tx, so that it commits with the
// caller's business write, or not at all. tx is the application's own
// transaction (see idem.Tx: a *sql.Tx on any pool on the same database,
// or a pgx.Tx on the postgres driver). On
// PostgreSQL a concurrent enqueue with the same unique key waits for tx to
// end, then returns the job tx inserted (or inserts its own if tx rolled
// back).
func (c *Client) EnqueueTx(ctx context.Context, tx idem.Tx, args Args, opts *EnqueueOpts) (*EnqueueResult, error) {
	ex, err := c.executor(tx)
	if err != nil {
		return nil, err
	}
	res, err := c.enqueue(ctx, ex, []EnqueueParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return &res[0], nil
}

// EnqueueMany inserts a batch in one transaction: all or none. Results are
// in the order of params; duplicates (also within the batch) are reported
// per job.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) ([]EnqueueResult, error) {
	return c.enqueue(ctx, driver.Shared, params)
}

// EnqueueManyTx inserts a batch inside tx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx idem.Tx, params []EnqueueParams) ([]EnqueueResult, error) {
	ex, err := c.executor(tx)
	if err != nil {
		return nil, err
	}
	return c.enqueue(ctx, ex, params)
}

// executor adapts the caller's transaction for the driver.
func (c *Client) executor(tx idem.Tx) (driver.Executor, error) {
	if tx == nil {
		return nil, inputErr("tx", "must not be nil")
	}
	ex, err := c.drv.Executor(tx)
	if err != nil {
		return nil, inputErr("tx", "%v", err)
	}
	return ex, nil
}

func (c *Client) enqueue(ctx context.Context, q driver.Executor, params []EnqueueParams) ([]EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	ins := make([]driver.JobInsert, len(params))
	for i, p := range params {
		if len(params) > 1 && rejects(p.Opts) {
			return nil, fmt.Errorf("jobs: batch job %d: %w", i, inputErr("unique on duplicate", "DuplicateReject is for Enqueue and EnqueueTx; a batch reports duplicates per job"))
		}
		j, err := c.prepare(p)
		if err != nil {
			if len(params) > 1 {
				return nil, fmt.Errorf("jobs: batch job %d: %w", i, err)
			}
			return nil, err
		}
		ins[i] = j
	}
	rows, dup, err := c.drv.EnqueueJobs(ctx, q, ins)
	if err != nil {
		return nil, fmt.Errorf("jobs: enqueue: %w", err)
	}
	out := make([]EnqueueResult, len(rows))
	var due []string
	for i, r := range rows {
		out[i] = EnqueueResult{Job: &r, Duplicate: dup[i]}
		if dup[i] {
			if rejects(params[i].Opts) {
				return nil, &DuplicateError{Job: &r}
			}
			continue
		}
		c.cfg.Metrics.JobTransition(r.Queue, TransitionNone, TransitionAvailable)
		if !r.RunAt.After(r.Now) {
			due = append(due, r.Queue)
		}
	}
	if err := c.announce(ctx, q, due); err != nil {
		return nil, fmt.Errorf("jobs: enqueue: %w", err)
	}
	return out, nil
}

// prepare validates one job and fills its defaults. Nothing is written
// for a bad job.
func (c *Client) prepare(p EnqueueParams) (driver.JobInsert, error) {
	if p.Args == nil {
		return driver.JobInsert{}, inputErr("args", "must not be nil")
	}
	o := EnqueueOpts{}
	if p.Opts != nil {
		o = *p.Opts
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if err := c.checkQueue(o.Queue); err != nil {
		return driver.JobInsert{}, err
	}
	kind := p.Args.Kind()
	if err := checkText("kind", kind, maxKindLen); err != nil {
		return driver.JobInsert{}, err
	}
	if c.cfg.Workers != nil && !c.cfg.Workers.has(kind) {
		return driver.JobInsert{}, inputErr("kind", "%q has no worker in Config.Workers", kind)
	}
	if o.UniqueKey != "" {
		if err := checkText("unique key", o.UniqueKey, maxUniqueKeyLen); err != nil {
			return driver.JobInsert{}, err
		}
	}
	meta, err := checkMetadata(o.Metadata, o.PartitionKey)
	if err != nil {
		return driver.JobInsert{}, err
	}
	switch {
	case o.Delay < 0:
		return driver.JobInsert{}, inputErr("delay", "%v must not be negative", o.Delay)
	case o.Delay > maxDelay:
		return driver.JobInsert{}, inputErr("delay", "%v is longer than %v", o.Delay, maxDelay)
	case o.Delay != 0 && !o.RunAt.IsZero():
		return driver.JobInsert{}, inputErr("delay", "set together with RunAt; set one")
	case o.MaxAttempts < 0 || o.MaxAttempts > MaxAttemptLimit:
		return driver.JobInsert{}, inputErr("max attempts", "%d is outside [1, %d]", o.MaxAttempts, MaxAttemptLimit)
	case o.Priority < 0 || o.Priority > idemtype.JobPriorityLowest:
		return driver.JobInsert{}, inputErr("priority", "%d is outside [%d, %d] (1 is the highest)", o.Priority, idemtype.JobPriorityHighest, idemtype.JobPriorityLowest)
	}
	b, err := encodeArgs(p.Args)
	if err != nil {
		return driver.JobInsert{}, inputErr("args", "%v", err)
	}
	if len(b) > c.cfg.MaxArgsBytes {
		return driver.JobInsert{}, inputErr("args", "are %d bytes, more than the limit of %d (Config.MaxArgsBytes)", len(b), c.cfg.MaxArgsBytes)
	}
	key, states, err := uniqueKey(&o, kind, b, time.Now())
	if err != nil {
		return driver.JobInsert{}, err
	}
	if key != o.UniqueKey {
		if err := checkText("unique key", key, maxUniqueKeyLen); err != nil {
			return driver.JobInsert{}, err
		}
	}
	return driver.JobInsert{
		Queue: o.Queue, Kind: kind, Args: b, UniqueKey: key, UniqueStates: states, UniqueAcrossQueues: acrossQueues(&o),
		MaxAttempts: cmp.Or(o.MaxAttempts, c.cfg.MaxAttempts), RunAt: o.RunAt, Delay: o.Delay,
		Priority: cmp.Or(o.Priority, idemtype.JobPriorityHighest), Metadata: meta, PartitionKey: o.PartitionKey,
	}, nil
}
