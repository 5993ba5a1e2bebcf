package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemdev/idem/jobs"
)

// Delivery is the state of one message or chunk.
type Delivery struct {
	// Key is the Idempotency-Key: the message ID, or "<ID>/<n>" for chunk
	// n of a fan-out.
	Key      string
	JobID    int64
	State    jobs.State
	Attempts int
	// Outcome is the receiver's successful answer, once delivered.
	Outcome *Outcome
	// LastError is the last failed attempt's error, if any.
	LastError   string
	DeliveredAt time.Time
}

// Status returns the deliveries of message id, in chunk order. An ID with
// no deliveries (never added, or pruned after delivery) returns none.
func (o *Outbox) Status(ctx context.Context, id string) ([]Delivery, error) {
	var out []Delivery
	var after int64
	for {
		recs, err := o.jobs.List(ctx, &jobs.ListParams{Queue: o.queue, KeyPrefix: id, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("outbox: status %s: %w", id, err)
		}
		for _, r := range recs {
			after = r.ID
			if r.UniqueKey != id && !strings.HasPrefix(r.UniqueKey, id+"/") {
				continue
			}
			d := Delivery{Key: r.UniqueKey, JobID: r.ID, State: r.State, Attempts: r.Attempt}
			if len(r.Errors) > 0 {
				d.LastError = r.Errors[len(r.Errors)-1].Error
			}
			if r.State == jobs.StateCompleted {
				d.DeliveredAt = r.FinalizedAt
				var oc Outcome
				if json.Unmarshal(r.Result, &oc) == nil {
					d.Outcome = &oc
				}
			}
			out = append(out, d)
		}
		if len(recs) < 1000 {
			return out, nil
		}
	}
}
