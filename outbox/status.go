package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// Delivery is the state of one message or chunk.
type Delivery struct {
	// Key is the Idempotency-Key: the message ID, or "<ID>/<n>" for chunk
	// n of a fan-out.
	Key   string
	JobID int64
	// URL is where the delivery goes.
	URL   string
	State idemtype.JobState
	// Attempts counts the attempts made so far, of MaxAttempts.
	Attempts    int
	MaxAttempts int
	// Outcome is the receiver's successful answer, once delivered.
	Outcome *Outcome
	// LastError is the last failed attempt's error, if any.
	LastError string
	// NextAttemptAt is when an available delivery is tried (again); zero
	// in other states.
	NextAttemptAt time.Time
	DeliveredAt   time.Time
	// DeadAt is when a dead delivery was dead-lettered.
	DeadAt time.Time
}

// deliveryFrom reads a delivery from its job.
func deliveryFrom(r *idemtype.JobRow) Delivery {
	d := Delivery{Key: r.UniqueKey, JobID: r.ID, State: r.State, Attempts: r.Attempt, MaxAttempts: r.MaxAttempts}
	var args struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(r.Args, &args) == nil {
		d.URL = args.URL
	}
	if len(r.Errors) > 0 {
		d.LastError = r.Errors[len(r.Errors)-1].Error
	}
	switch r.State {
	case idemtype.JobAvailable:
		d.NextAttemptAt = r.RunAt
	case idemtype.JobCompleted:
		d.DeliveredAt = r.FinalizedAt
		var oc Outcome
		if json.Unmarshal(r.Result, &oc) == nil {
			d.Outcome = &oc
		}
	case idemtype.JobDead:
		d.DeadAt = r.FinalizedAt
	}
	return d
}

// Status returns the deliveries of message id, in chunk order. An ID with
// no deliveries (never added, or pruned after delivery) returns none. A
// chunk's key ("<ID>/<n>") returns that chunk alone.
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
			out = append(out, deliveryFrom(r))
		}
		if len(recs) < 1000 {
			return out, nil
		}
	}
}

// ListParams selects deliveries for List. Zero values match everything.
type ListParams struct {
	State idemtype.JobState
	// AfterJobID pages through results: pass the last JobID of the
	// previous page.
	AfterJobID int64
	// Limit defaults to 100.
	Limit int
}

// List returns deliveries of every message in job id order (the order they
// were added), for operators looking for dead or stuck ones.
func (o *Outbox) List(ctx context.Context, p *ListParams) ([]Delivery, error) {
	lp := jobs.ListParams{Queue: o.queue}
	if p != nil {
		lp.State, lp.AfterID, lp.Limit = p.State, p.AfterJobID, p.Limit
	}
	recs, err := o.jobs.List(ctx, &lp)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	out := make([]Delivery, len(recs))
	for i, r := range recs {
		out[i] = deliveryFrom(r)
	}
	return out, nil
}
