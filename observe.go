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
	EventStep      EventKind = "step"       // a run's step ended (Step, StepOutcome)
)

// StepOutcome is what became of one step of a run (EventStep).
type StepOutcome string

// Step outcomes.
const (
	StepRan      StepOutcome = "ran"      // the step ran and its checkpoint committed
	StepReplayed StepOutcome = "replayed" // done by an earlier attempt: its checkpoint was returned
	StepFound    StepOutcome = "found"    // unknown outcome; the lookup found it done
	StepFailed   StepOutcome = "failed"   // unknown outcome; the lookup found it failed
	StepParked   StepOutcome = "parked"   // unknown outcome nobody could decide: the run parked
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
	// Step and StepOutcome name a run's step and what became of it
	// (EventStep).
	Step        string
	StepOutcome StepOutcome
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
