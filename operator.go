package idem

import (
	"bytes"
	"context"
	"encoding/json"
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
// lease is refused with ErrLiveLease unless r.Force. Succeeded or failed
// ends a multi-step run: its step records are deleted after the record is
// written (a released run keeps them, to resume from).
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
	if r.As != idemtype.StateReleased {
		// A finished run's step records go, as when the run finishes
		// itself (a released one keeps them to resume from). Nothing can
		// write them any more: if this fails they only linger until the
		// key's next life.
		if err := l.drv.StepDelete(ctx, driver.Shared, scope, key); err != nil {
			l.log.WarnContext(ctx, "resolved a run but kept its step records", "key", l.keyName(key), "error", err.Error())
		}
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

// ErrStepNotFound means a key's unfinished run has no step of that name.
var ErrStepNotFound = errors.New("idem: run has no such step")

// StepResolution is an operator's decision about a step whose outcome is
// unknown: an external step (CallStep) that was started and never
// checkpointed, in a run that parked (no StepLookup, or it could not tell)
// or whose holder went away.
type StepResolution struct {
	// Step is the step's name.
	Step string
	// As is VerdictDone (Result is checkpointed as the step's result: the
	// resumed run returns it without calling the step) or VerdictNotDone
	// (the resumed run calls the step again, with the same step key).
	As Verdict
	// Result is the step's result as JSON, for VerdictDone: what the
	// step's function would have returned, at most MaxStepResultLen bytes
	// once compacted.
	Result []byte
	// Force resolves a step of an in-progress record under a live lease.
	// Its holder is fenced out: its checkpoints fail with ErrLeaseLost.
	Force bool
}

// ResolveStep applies an operator's decision to a started step of a
// parked run, or of an in-progress one whose lease ended, and hands the
// run back: in the same transaction the record becomes in progress with
// its lease ended, so the next retry of the same op, or a Completer for a
// registered run, reclaims it with a newer token and resumes it from its
// checkpoints. An in-progress record under a live lease is refused with
// ErrLiveLease unless r.Force.
//
// Errors: ErrNotFound (no record), ErrStepNotFound, ErrStepResult (Result
// is not JSON or too long), ErrLiveLease, and an error naming the state of
// a step that is not started (its outcome is known) or of a record that is
// neither parked nor in progress. Nothing is written then.
func (l *Ledger) ResolveStep(ctx context.Context, scope, key string, r StepResolution) (idemtype.Record, error) {
	start := time.Now()
	rec, err := l.resolveStep(ctx, scope, key, r)
	l.observe(ctx, Event{Kind: EventResolve, Op: Op{Scope: scope, Key: key, Fingerprint: rec.Fingerprint},
		State: rec.State, Verdict: r.As, Step: r.Step, Attempt: rec.Attempt, Took: time.Since(start), Err: err})
	return rec, err
}

func (l *Ledger) resolveStep(ctx context.Context, scope, key string, r StepResolution) (idemtype.Record, error) {
	p := driver.StepResolveParams{Scope: scope, Key: key, Name: r.Step, Force: r.Force}
	switch r.As {
	case VerdictDone:
		var b bytes.Buffer
		if err := json.Compact(&b, r.Result); err != nil {
			return idemtype.Record{}, fmt.Errorf("%w: step %q: the result is not JSON: %w", ErrStepResult, r.Step, err)
		}
		if b.Len() > MaxStepResultLen {
			return idemtype.Record{}, fmt.Errorf("%w: step %q: the result is %d bytes of JSON, more than %d", ErrStepResult, r.Step, b.Len(), MaxStepResultLen)
		}
		p.Done, p.Result = true, b.Bytes()
	case VerdictNotDone:
		if len(r.Result) > 0 {
			return idemtype.Record{}, &InputError{Field: "result", Reason: "a step that is not done has no result"}
		}
	default:
		return idemtype.Record{}, &InputError{Field: "as", Reason: fmt.Sprintf("%s: want done or not done", r.As)}
	}
	if r.Step == "" {
		return idemtype.Record{}, &InputError{Field: "step", Reason: "is empty"}
	}
	rec, err := l.drv.StepResolve(ctx, p)
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, driver.ErrFenced) {
		return idemtype.Record{}, fmt.Errorf("idem: resolve step %q of %s: %w", r.Step, l.keyName(key), err)
	}
	// Refused: say why, from what is there now.
	cur, err := l.Get(ctx, scope, key)
	if err != nil {
		return idemtype.Record{}, err
	}
	steps, err := l.RunSteps(ctx, scope, key)
	if err != nil {
		return cur, err
	}
	var step *idemtype.Step
	for i := range steps {
		if steps[i].Index >= 0 && steps[i].Name == r.Step {
			step = &steps[i]
		}
	}
	switch {
	case step == nil:
		return cur, fmt.Errorf("idem: resolve step %q of %s: %w (the record is %s, with %d step records)", r.Step, l.keyName(key), ErrStepNotFound, cur.State, len(steps))
	case step.State != idemtype.StepStarted:
		return cur, fmt.Errorf("idem: resolve step %q of %s: the step is %s, not started: its outcome is known", r.Step, l.keyName(key), step.State)
	case cur.State == idemtype.StateInProgress && !cur.Stale():
		return cur, fmt.Errorf("idem: resolve step %q of %s: %w (until %s); use force to override", r.Step, l.keyName(key), ErrLiveLease, cur.LeaseUntil.UTC().Format("15:04:05.000"))
	case cur.State != idemtype.StateInProgress && cur.State != idemtype.StateParked:
		return cur, fmt.Errorf("idem: resolve step %q of %s: record is %s, not parked or in progress", r.Step, l.keyName(key), cur.State)
	}
	return cur, fmt.Errorf("idem: resolve step %q of %s: the record changed meanwhile; try again", r.Step, l.keyName(key))
}

// StoppedRun is a multi-step run stopped between steps, as operators see
// it: its record (in progress or parked) and its step records, the run's
// header (Index -1, for a registered run) first.
type StoppedRun struct {
	Record idemtype.Record
	Steps  []idemtype.Step
}

// StoppedRuns returns up to limit unfinished multi-step runs (records in
// progress or parked that have step records), most recently updated
// first, each with its steps: what the admin page lists. A run that
// finishes between the two reads is left out.
func (l *Ledger) StoppedRuns(ctx context.Context, limit int) ([]StoppedRun, error) {
	recs, err := l.drv.StepRuns(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("idem: stopped runs: %w", err)
	}
	out := make([]StoppedRun, 0, len(recs))
	for _, rec := range recs {
		steps, err := l.RunSteps(ctx, rec.Scope, rec.Key)
		if err != nil {
			return out, err
		}
		if len(steps) > 0 {
			out = append(out, StoppedRun{Record: rec, Steps: steps})
		}
	}
	return out, nil
}
