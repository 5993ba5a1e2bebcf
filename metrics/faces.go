package metrics

import "time"

// The methods below are for the faces built on the ledger. Each takes plain
// values, so a package can declare the one-method interface it needs and
// accept a *Collector without importing this package.

// GatewayAdded records the time the gateway added to one request on top of
// the upstream's own time (claim, store, and proxying overhead).
func (c *Collector) GatewayAdded(d time.Duration) { c.gatewayAdded.Observe(d.Seconds()) }

// JobTransition counts one job moving from one state to another in queue
// (e.g. "available" → "running", "running" → "retryable", "running" →
// "dead", "running" → "snoozed", "available" → "cancelled"; jobs.Metrics
// lists them). Queue names are a label: keep them few.
func (c *Collector) JobTransition(queue, from, to string) {
	c.jobTransitions.WithLabelValues(queue, from, to).Inc()
}

// JobRun records how long one job's work ran and how it ended
// ("succeeded", "retry", "dead", "lease_lost", "snoozed", "cancelled").
func (c *Collector) JobRun(queue, outcome string, d time.Duration) {
	c.jobRunSeconds.WithLabelValues(queue, outcome).Observe(d.Seconds())
}

// OutboxDelivery counts one delivery attempt of an outbox message by
// outcome ("delivered", "retry", "failed", "dead").
func (c *Collector) OutboxDelivery(outcome string) {
	c.outboxDelivered.WithLabelValues(outcome).Inc()
}

// ChunkRetry counts one fan-out chunk sent again after a failure.
func (c *Collector) ChunkRetry(face string) { c.chunkRetries.WithLabelValues(face).Inc() }

// ResponseUnrecorded counts one HTTP response that reached its client but
// could not be recorded (idemhttp.Options.RecordFailed): a retry after the
// claim's lease is handled again under the stale-claim policy, so each one
// is a possible second execution that only key forwarding makes safe.
func (c *Collector) ResponseUnrecorded(face string) { c.unrecorded.WithLabelValues(face).Inc() }
