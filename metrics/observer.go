package metrics

import (
	"context"
	"errors"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// Observer returns the idem.Observer to pass as idem.Options.Observer for
// a ledger used directly by application code (face "library").
func (c *Collector) Observer() idem.Observer { return c.FaceObserver(FaceLibrary) }

// FaceObserver returns an idem.Observer whose series carry the given face
// label: the HTTP middleware passes FaceHTTP, the gateway FaceGateway, and
// so on, each for the ledger it opens. Keep the set of faces small: it is a
// label value.
func (c *Collector) FaceObserver(face string) idem.Observer {
	return func(_ context.Context, e idem.Event) { c.observe(face, e) }
}

func (c *Collector) observe(face string, e idem.Event) {
	switch e.Kind {
	case idem.EventClaim:
		c.claimed(face, e)
	case idem.EventFinish:
		if e.Err != nil {
			c.errors.WithLabelValues(face, "finish").Inc()
			return
		}
		st := string(e.State)
		c.finishes.WithLabelValues(face, st).Inc()
		c.completeSeconds.WithLabelValues(face, st).Observe(e.Took.Seconds())
	case idem.EventLeaseLost:
		c.leasesLost.WithLabelValues(face).Inc()
		c.totals.leasesLost.Add(1)
		c.history.add(func(s *Sample) { s.LeasesLost++ })
	case idem.EventReconcile:
		verdict := e.Verdict.String()
		if e.Err != nil {
			verdict = "error"
		}
		c.reconciled(face, "reconciler", verdict)
	case idem.EventResolve:
		if e.Err != nil {
			c.errors.WithLabelValues(face, "resolve").Inc()
			return
		}
		if e.Step != "" { // a step of a run (Ledger.ResolveStep)
			c.reconciled(face, "operator", e.Verdict.String())
			return
		}
		c.reconciled(face, "operator", resolveVerdict(e.State))
	case idem.EventStep:
		c.steps.WithLabelValues(face, string(e.StepOutcome)).Inc()
	case idem.EventPrune:
		c.pruneBatches.Inc()
		c.pruneTombstoned.Add(float64(e.Tombstoned))
		c.pruneDeleted.Add(float64(e.Deleted))
		c.totals.tombstoned.Add(int64(e.Tombstoned))
		c.totals.deleted.Add(int64(e.Deleted))
	}
}

func (c *Collector) claimed(face string, e idem.Event) {
	outcome := e.Outcome.String()
	if e.Err != nil {
		// A *ConflictError (expired) still reports its outcome; anything
		// else is an error: the claim may or may not have been taken.
		if ce := (*idem.ConflictError)(nil); !errors.As(e.Err, &ce) {
			outcome = "error"
			c.errors.WithLabelValues(face, "claim").Inc()
		}
	}
	c.claims.WithLabelValues(face, outcome).Inc()
	c.claimSeconds.WithLabelValues(face, outcome).Observe(e.Took.Seconds())
	c.totals.claim(outcome)
	k := ClassifyClaim(e)
	if k.Duplicate {
		c.duplicates.WithLabelValues(face).Inc()
		c.totals.duplicates.Add(1)
		c.history.add(func(s *Sample) { s.DuplicatesPrevented++ })
	}
	if k.Mismatch {
		c.totals.mismatches.Add(1)
		c.history.add(func(s *Sample) { s.Mismatches++ })
	}
	if k.Reclaim {
		c.totals.reclaims.Add(1)
		c.history.add(func(s *Sample) { s.Reclaims++ })
	}
	if e.Outcome == idem.Parked {
		c.totals.parked.Add(1)
	}
	if k.Expired {
		c.expiredReplays.WithLabelValues(face).Inc()
		c.totals.expired.Add(1)
		c.history.add(func(s *Sample) { s.ExpiredReplays++ })
	}
}

// ClaimKind says which of the operator's counters one claim event adds
// to: the Collector's totals and the admin page's per-process reports
// count claims by it.
type ClaimKind struct {
	Duplicate bool // not run again: a replay or an in-flight rejection
	Replay    bool // answered with a stored result
	Mismatch  bool // the key reused with another request
	Reclaim   bool // a stale claim taken over
	Expired   bool // a retry after the key's replay window
}

// ClassifyClaim sorts an idem.EventClaim event (see ClaimKind).
func ClassifyClaim(e idem.Event) ClaimKind {
	var k ClaimKind
	switch e.Outcome {
	case idem.Replay, idem.InFlight:
		k.Duplicate = e.Err == nil
		k.Replay = k.Duplicate && e.Outcome == idem.Replay
	case idem.Mismatch:
		k.Mismatch = true
	case idem.Reclaimed:
		k.Reclaim = true
	}
	k.Expired = errors.Is(e.Err, idem.ErrExpired)
	return k
}

func (c *Collector) reconciled(face, by, verdict string) {
	c.reconciliations.WithLabelValues(face, by, verdict).Inc()
	c.totals.reconciliations.Add(1)
}

// resolveVerdict names an operator's resolution in the reconciler's words:
// succeeded is done, failed is failed, released is not done.
func resolveVerdict(s idemtype.State) string {
	switch s {
	case idemtype.StateSucceeded:
		return idem.VerdictDone.String()
	case idemtype.StateFailed:
		return idem.VerdictFailed.String()
	case idemtype.StateReleased:
		return idem.VerdictNotDone.String()
	}
	return "unknown"
}
