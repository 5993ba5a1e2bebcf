package idem

import "time"

// EventKind names what an Event reports.
type EventKind string

// Event kinds.
const (
	EventClaim     EventKind = "claim"      // a Claim ended (Outcome, or Err)
	EventFinish    EventKind = "finish"     // Complete, Fail, Release or Park wrote State
	EventLeaseLost EventKind = "lease_lost" // a fenced write was refused
	EventReconcile EventKind = "reconcile"  // a Reconciler answered Verdict
	EventPrune     EventKind = "prune"      // a prune batch ran
)

// Event is one thing the ledger did, for metrics and tracing.
type Event struct {
	Kind    EventKind
	Op      Op
	Outcome Outcome
	State   State
	Verdict Verdict
	Attempt int64
	Took    time.Duration
	Err     error
	// Tombstoned and Deleted count a prune batch's rows.
	Tombstoned, Deleted int
}

// Observer receives every Event. It is called synchronously on the
// operation's goroutine and must not block.
type Observer func(Event)

func (l *Ledger) observe(e Event) {
	if l.obs != nil {
		l.obs(e)
	}
}
