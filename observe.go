package idem

import (
	"context"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// EventKind names what an Event reports.
type EventKind string

// Event kinds.
const (
	EventClaim     EventKind = "claim"      // a Claim ended (Outcome, or Err)
	EventFinish    EventKind = "finish"     // Complete, Fail, Release or Park wrote State
	EventLeaseLost EventKind = "lease_lost" // a fenced write was refused
	EventReconcile EventKind = "reconcile"  // a Reconciler answered Verdict
	EventPrune     EventKind = "prune"      // a prune batch ran
	EventResolve   EventKind = "resolve"    // an operator resolved a record (State, or Err)
)

// Event is one thing the ledger did, for metrics and tracing.
type Event struct {
	Kind    EventKind
	Op      Op
	Outcome Outcome
	State   idemtype.State
	Verdict Verdict
	Attempt int64
	Took    time.Duration
	Err     error
	// Tombstoned and Deleted count a prune batch's rows.
	Tombstoned, Deleted int
}

// Observer receives every Event with the operation's context (so that a
// tracer can parent its span). It is called synchronously on the
// operation's goroutine and must not block.
type Observer func(ctx context.Context, e Event)

func (l *Ledger) observe(ctx context.Context, e Event) {
	if l.obs != nil {
		l.obs(ctx, e)
	}
}

// Observers combines observers (metrics and tracing, say) into one that
// calls each in order. Nil entries are skipped.
func Observers(obs ...Observer) Observer {
	var list []Observer
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	return func(ctx context.Context, e Event) {
		for _, o := range list {
			o(ctx, e)
		}
	}
}
