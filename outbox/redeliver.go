package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// Redeliver hands the dead deliveries of message id (or the one chunk
// "<ID>/<n>") back to the relay, available now with Config.MaxAttempts
// more attempts; each is sent again with its own Idempotency-Key, so a
// receiver that honours keys still applies it once. Deliveries that are
// not dead are left alone: an available one is tried at its NextAttemptAt,
// and a running one whose relay died is taken back after its lease. It
// returns the deliveries requeued. It fails with jobs.ErrNotFound if id
// has no deliveries, and jobs.ErrWrongState if none of them is dead.
func (o *Outbox) Redeliver(ctx context.Context, id string) ([]Delivery, error) {
	all, err := o.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("outbox: redeliver %s: %w", id, jobs.ErrNotFound)
	}
	var out []Delivery
	for _, d := range all {
		if d.State != idemtype.JobDead {
			continue
		}
		r, err := o.jobs.Requeue(ctx, d.JobID)
		if errors.Is(err, jobs.ErrWrongState) || errors.Is(err, jobs.ErrNotFound) {
			continue // requeued or discarded meanwhile by someone else
		}
		if err != nil {
			return out, fmt.Errorf("outbox: redeliver %s: %w", d.Key, err)
		}
		out = append(out, deliveryFrom(r))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("outbox: redeliver %s: none of its %d deliveries is dead: %w", id, len(all), jobs.ErrWrongState)
	}
	return out, nil
}
