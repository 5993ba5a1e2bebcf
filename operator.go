package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
)

// ErrNotFound means the ledger has no record for the scope and key.
var ErrNotFound = errors.New("idem: record not found")

// ErrLiveLease is returned by Resolve for an in-progress record whose lease
// is still live, unless forced.
var ErrLiveLease = errors.New("idem: record is in progress under a live lease")

// Get reads the record for scope and key.
func (l *Ledger) Get(ctx context.Context, scope, key string) (Record, error) {
	rec, err := l.drv.Get(ctx, scope, key)
	if errors.Is(err, driver.ErrNotFound) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("idem: get %q: %w", key, err)
	}
	return recordFrom(rec), nil
}

// ListFilter selects records for List. Zero values match everything.
type ListFilter struct {
	State State
	Stale bool // in-progress records whose lease has ended
	Scope string
	Limit int // default 100
}

// List returns records, most recently updated first, for operators.
func (l *Ledger) List(ctx context.Context, f ListFilter) ([]Record, error) {
	recs, err := l.drv.List(ctx, driver.ListFilter{State: driver.State(f.State), Stale: f.Stale, Scope: f.Scope, Limit: f.Limit})
	if err != nil {
		return nil, fmt.Errorf("idem: list: %w", err)
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = recordFrom(r)
	}
	return out, nil
}

// Resolution is an operator's decision about a parked or stuck record.
type Resolution struct {
	// As is StateSucceeded, StateFailed (Result stored and replayed) or
	// StateReleased (the next claim runs it again).
	As     State
	Result Result
	// Force resolves an in-progress record under a live lease. Its holder
	// is fenced out: its own completion will fail with ErrLeaseLost.
	Force bool
}

// Resolve applies an operator's decision to a parked record, or to an
// in-progress one whose lease ended. An in-progress record under a live
// lease is refused with ErrLiveLease unless r.Force.
func (l *Ledger) Resolve(ctx context.Context, scope, key string, r Resolution) (Record, error) {
	start := time.Now()
	rec, err := l.resolve(ctx, scope, key, r)
	l.observe(ctx, Event{Kind: EventResolve, Op: Op{Scope: scope, Key: key, Fingerprint: rec.Fingerprint},
		State: r.As, Attempt: rec.Attempt, Took: time.Since(start), Err: err})
	return rec, err
}

func (l *Ledger) resolve(ctx context.Context, scope, key string, r Resolution) (Record, error) {
	switch r.As {
	case StateSucceeded, StateFailed, StateReleased:
	default:
		return Record{}, &InputError{Field: "as", Reason: fmt.Sprintf("%q: want succeeded, failed or released", r.As)}
	}
	rec, err := l.drv.Resolve(ctx, driver.ResolveParams{
		Scope: scope, Key: key, State: driver.State(r.As),
		Status: r.Result.Status, Meta: r.Result.Meta, Body: r.Result.Body, Force: r.Force,
	})
	if errors.Is(err, driver.ErrFenced) {
		cur, gerr := l.Get(ctx, scope, key)
		switch {
		case gerr != nil:
			return Record{}, gerr
		case cur.State == StateInProgress && !cur.Stale():
			return cur, fmt.Errorf("resolve %q: %w (until %s); use force to override", key, ErrLiveLease, cur.LeaseUntil.UTC().Format("15:04:05.000"))
		default:
			return cur, fmt.Errorf("idem: resolve %q: record is %s, not parked or in progress", key, cur.State)
		}
	}
	if err != nil {
		return Record{}, fmt.Errorf("idem: resolve %q: %w", key, err)
	}
	return recordFrom(rec), nil
}
