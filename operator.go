package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// ErrNotFound means the ledger has no record for the scope and key.
var ErrNotFound = errors.New("idem: record not found")

// ErrLiveLease is returned by Resolve for an in-progress record whose lease
// is still live, unless forced.
var ErrLiveLease = errors.New("idem: record is in progress under a live lease")

// Get reads the record for scope and key.
func (l *Ledger) Get(ctx context.Context, scope, key string) (idemtype.Record, error) {
	rec, err := l.drv.Get(ctx, scope, key)
	if errors.Is(err, driver.ErrNotFound) {
		return idemtype.Record{}, ErrNotFound
	}
	if err != nil {
		return idemtype.Record{}, fmt.Errorf("idem: get %s: %w", l.keyName(key), err)
	}
	return rec, nil
}

// List returns records, most recently updated first, for operators.
func (l *Ledger) List(ctx context.Context, f idemtype.ListFilter) ([]idemtype.Record, error) {
	recs, err := l.drv.List(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("idem: list: %w", err)
	}
	return recs, nil
}

// Resolution is an operator's decision about a parked or stuck record.
type Resolution struct {
	// As is idemtype.StateSucceeded, idemtype.StateFailed (Result stored and
	// replayed) or
	// idemtype.StateReleased (the next claim runs it again).
	As     idemtype.State
	Result Result
	// Force resolves an in-progress record under a live lease. Its holder
	// is fenced out: its own completion will fail with ErrLeaseLost.
	Force bool
}

// Resolve applies an operator's decision to a parked record, or to an
// in-progress one whose lease ended. An in-progress record under a live
// lease is refused with ErrLiveLease unless r.Force.
func (l *Ledger) Resolve(ctx context.Context, scope, key string, r Resolution) (idemtype.Record, error) {
	start := time.Now()
	rec, err := l.resolve(ctx, scope, key, r)
	l.observe(ctx, Event{Kind: EventResolve, Op: Op{Scope: scope, Key: key, Fingerprint: rec.Fingerprint},
		State: r.As, Attempt: rec.Attempt, Took: time.Since(start), Err: err})
	return rec, err
}

func (l *Ledger) resolve(ctx context.Context, scope, key string, r Resolution) (idemtype.Record, error) {
	switch r.As {
	case idemtype.StateSucceeded, idemtype.StateFailed, idemtype.StateReleased:
	default:
		return idemtype.Record{}, &InputError{Field: "as", Reason: fmt.Sprintf("%q: want succeeded, failed or released", r.As)}
	}
	rec, err := l.drv.Resolve(ctx, driver.ResolveParams{
		Scope: scope, Key: key, State: r.As,
		Status: r.Result.Status, Meta: r.Result.Meta, Body: r.Result.Body, Force: r.Force,
	})
	if errors.Is(err, driver.ErrFenced) {
		cur, gerr := l.Get(ctx, scope, key)
		switch {
		case gerr != nil:
			return idemtype.Record{}, gerr
		case cur.State == idemtype.StateInProgress && !cur.Stale():
			return cur, fmt.Errorf("resolve %s: %w (until %s); use force to override", l.keyName(key), ErrLiveLease, cur.LeaseUntil.UTC().Format("15:04:05.000"))
		default:
			return cur, fmt.Errorf("idem: resolve %s: record is %s, not parked or in progress", l.keyName(key), cur.State)
		}
	}
	if err != nil {
		return idemtype.Record{}, fmt.Errorf("idem: resolve %s: %w", l.keyName(key), err)
	}
	return rec, nil
}

// RunSteps returns the step records of an unfinished multi-step run of
// (scope, key), for operators: the run's header first (Index -1, for a run
// started through AddRun: its name and input), then each checkpointed or
// started step. A finished run has none (they go with its result).
func (l *Ledger) RunSteps(ctx context.Context, scope, key string) ([]idemtype.Step, error) {
	steps, err := l.drv.StepList(ctx, scope, key)
	if err != nil {
		return nil, fmt.Errorf("idem: steps of %s: %w", l.keyName(key), err)
	}
	return steps, nil
}
