package idem

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// StalePolicy decides what a claim does with an in-progress record whose
// lease has ended: its holder died, paused, or lost the network, and may or
// may not have performed the effect.
type StalePolicy int

const (
	// Redo reclaims the key with a newer token (Outcome Reclaimed) and runs
	// the operation again with the same key. Safe when the effect is local
	// (it rolled back with the holder) or the downstream deduplicates on
	// the forwarded key. The default.
	StaleRedo StalePolicy = iota + 1
	// StaleReconcile reclaims the key, then asks the Reconciler what happened
	// downstream: done (the result is stored and replayed), not done (the
	// caller runs it, Outcome Reclaimed) or unknown (parked).
	StaleReconcile
	// Park moves the record to parked: nobody runs it again until an
	// operator (idem reconcile) or a reconciler decides.
	StalePark
)

// String names the policy.
func (p StalePolicy) String() string {
	switch p {
	case StaleRedo:
		return "redo"
	case StaleReconcile:
		return "reconcile"
	case StalePark:
		return "park"
	}
	return "default"
}

// Verdict is a reconciler's answer about a stale operation.
type Verdict int

const (
	// VerdictUnknown: the downstream cannot tell. The claim is parked. The zero
	// value, so a reconciler that says nothing never causes a redo.
	VerdictUnknown Verdict = iota
	// VerdictDone: the effect happened; the Result given is stored and replayed.
	VerdictDone
	// VerdictFailed: the operation ran and failed permanently; the Result is
	// stored as a failure and replayed.
	VerdictFailed
	// VerdictNotDone: the effect certainly did not happen; the caller runs it.
	VerdictNotDone
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictDone:
		return "done"
	case VerdictFailed:
		return "failed"
	case VerdictNotDone:
		return "not_done"
	}
	return "unknown"
}

// Reconciler looks up downstream, by key, what became of an operation whose
// holder vanished. It runs while the caller holds a fresh claim on the key,
// so no one else acts on it meanwhile. An error leaves the claim to expire,
// after which the next claim asks again.
type Reconciler func(ctx context.Context, rec idemtype.Record) (Verdict, Result, error)

// reconcileStale asks the reconciler about a reclaimed key and records its
// answer with the new token.
func (l *Ledger) reconcileStale(ctx context.Context, ex driver.Executor, c *Claim) (*Claim, error) {
	v, res, err := l.reconcile(ctx, c.Record)
	l.observe(ctx, Event{Kind: EventReconcile, Op: c.Op, Attempt: c.Token, Verdict: v, Err: err})
	if err != nil {
		return nil, fmt.Errorf("idem: reconcile %s: %w", l.keyName(c.Op.Key), err)
	}
	l.logOp(ctx, slog.LevelInfo, "stale claim reconciled", c.Op, c.Token, slog.String("verdict", v.String()))
	switch v {
	case VerdictNotDone:
		return c, nil
	case VerdictDone, VerdictFailed:
		st := idemtype.StateSucceeded
		if v == VerdictFailed {
			st = idemtype.StateFailed
		}
		if err := l.finish(ctx, ex, c, st, res); err != nil {
			return nil, err
		}
		res.Replayed = true
		// The record as stored now: Do tells a stored failure by its state.
		c.Record.State, c.Record.Status, c.Record.Meta, c.Record.Body = st, res.Status, res.Meta, res.Body
		return &Claim{Outcome: Replay, Op: c.Op, Record: c.Record, Result: res}, nil
	default:
		if err := l.finish(ctx, ex, c, idemtype.StateParked, Result{}); err != nil {
			return nil, err
		}
		l.logOp(ctx, slog.LevelWarn, "stale claim parked: outcome unknown", c.Op, c.Token)
		c.Record.State = idemtype.StateParked
		return &Claim{Outcome: Parked, Op: c.Op, Record: c.Record}, nil
	}
}
