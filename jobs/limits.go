package jobs

import "time"

// Limits bound a queue across every client and host that works it, in
// the database's claim: each claim of a limited queue counts, under a lock
// (an advisory lock per queue on PostgreSQL, SQLite's write lock), the
// queue's running jobs and the claims of the current rate window, and
// claims no more than the limits leave. Every client working the queue
// must configure the same limits: a client without them claims without
// looking.
//
// A running job holds its slot until it finishes, is cancelled, or its
// lease ends: the job of a crashed or paused worker frees its slot when
// its lease expires (Config.Lease after the last heartbeat), not before.
// So at most Concurrency jobs run with a live lease at any moment; a
// paused worker that wakes after its lease ended may still be running its
// handler (its context is cancelled at its next heartbeat, and its
// completion is refused) while the freed slot is used by another.
type Limits struct {
	// Concurrency, when positive, is the most jobs of the queue running at
	// once across all hosts. Zero means no global bound (each client still
	// runs at most its MaxWorkers).
	Concurrency int
	// PerPartition makes Concurrency a bound per partition key
	// (EnqueueOpts.PartitionKey; jobs without one share one partition)
	// instead of per queue. A claim looks at the first few thousand due
	// jobs in claim order, so a partition at its limit with a longer
	// backlog hides the jobs behind it until its own finish.
	PerPartition bool
	// Rate, when positive, is the most claims of the queue per
	// RateInterval across all hosts. Windows are aligned to the database
	// clock's epoch (window n covers [n, n+1) × RateInterval); retries and
	// rescued jobs count like first runs. A window's unused claims do not
	// carry over.
	Rate         int
	RateInterval time.Duration
}

func (l Limits) check(queue string) error {
	switch {
	case l.Concurrency < 0:
		return inputErr("queues", "%q: Limits.Concurrency %d must not be negative", queue, l.Concurrency)
	case l.PerPartition && l.Concurrency == 0:
		return inputErr("queues", "%q: Limits.PerPartition needs a Concurrency", queue)
	case l.Rate < 0:
		return inputErr("queues", "%q: Limits.Rate %d must not be negative", queue, l.Rate)
	case l.Rate > 0 && (l.RateInterval < time.Millisecond || l.RateInterval > 24*time.Hour):
		return inputErr("queues", "%q: Limits.RateInterval %v is outside [1ms, 24h]", queue, l.RateInterval)
	case l.Rate == 0 && l.RateInterval != 0:
		return inputErr("queues", "%q: Limits.RateInterval is set without a Rate", queue)
	}
	return nil
}
