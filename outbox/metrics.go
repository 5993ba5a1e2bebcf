package outbox

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
)

// Metrics receives the relay's counts, and through the jobs client under
// it, its deliveries' job transitions and run times. *metrics.Collector
// satisfies it; this package does not import metrics.
type Metrics interface {
	jobs.Metrics
	// OutboxDelivery counts one delivery attempt by outcome: see the
	// Delivery constants.
	OutboxDelivery(outcome string)
	// ChunkRetry counts one fan-out chunk sent again; face is "outbox".
	ChunkRetry(face string)
}

// The outcome values of Metrics.OutboxDelivery.
const (
	DeliveryDelivered = "delivered" // the receiver answered 2xx
	DeliveryRetry     = "retry"     // a network error, 408, 409, 425, 429 or 5xx (or a shutdown), with attempts left
	DeliveryFailed    = "failed"    // refused for good (another 4xx, a request that cannot be built): dead-lettered at once
	DeliveryDead      = "dead"      // a retryable failure on the last attempt: dead-lettered
)

// face is metrics.FaceOutbox.
const face = "outbox"

type noMetrics struct{}

func (noMetrics) JobTransition(queue, from, to string)          {}
func (noMetrics) JobRun(queue, outcome string, d time.Duration) {}
func (noMetrics) OutboxDelivery(string)                         {}
func (noMetrics) ChunkRetry(string)                             {}

// observe counts one delivery attempt of j that returned err.
func (r *relay) observe(ctx context.Context, j *jobs.Job[delivery], err error) {
	m := r.o.metrics
	var outcome string
	switch {
	case err == nil:
		outcome = DeliveryDelivered
	case errors.Is(context.Cause(ctx), jobs.ErrStopped):
		outcome = DeliveryRetry // released, tried again by the next relay
	case idem.IsPermanent(err):
		outcome = DeliveryFailed
	case j.Attempt >= j.MaxAttempts:
		outcome = DeliveryDead
	default:
		outcome = DeliveryRetry
	}
	m.OutboxDelivery(outcome)
}

// isChunk reports whether a delivery key names a chunk of a fan-out.
func isChunk(key string) bool { return strings.Contains(key, "/") }
