package driver

import (
	"context"

	"github.com/idemdev/idem/idemtype"
)

// Steps is what a database implements for multi-step runs (idem.Run): one
// row per (scope, key, step index), written only by the run's holder.
type Steps interface {
	// StepSave inserts or replaces step s.Index of the run that f holds,
	// in ex (the caller's transaction, or Shared). It is fenced like
	// Finish: ErrFenced, and nothing written, unless the record is in
	// progress with f's attempt and lease id and a live lease. Inside a
	// transaction it locks the record until the transaction ends, so a
	// takeover waits for the step's commit and then sees it. The row's
	// attempt and fingerprint are the record's.
	StepSave(ctx context.Context, ex Executor, f Fence, s idemtype.Step) error
	// StepList returns a run's steps, header (-1) first, in index order.
	StepList(ctx context.Context, scope, key string) ([]idemtype.Step, error)
	// StepDelete deletes a run's steps, in ex. Callers fence it by
	// finishing the record in the same transaction.
	StepDelete(ctx context.Context, ex Executor, scope, key string) error
	// StaleRuns returns up to limit runs with a header whose record is in
	// progress with its lease ended, longest stale first.
	StaleRuns(ctx context.Context, limit int) ([]idemtype.RunRef, error)
	// StepResolve applies an operator's decision about a started step
	// (index >= 0, named p.Name) whose outcome is unknown, in one
	// transaction: the step becomes done with p.Result, or (not Done) its
	// row is deleted so that the step runs again; and the record, parked
	// or in progress with its lease ended (any in-progress one with
	// Force), becomes in progress with its lease ended now and its attempt
	// unchanged: no holder of that attempt can write again, and the next
	// claim (a retry, a completer) reclaims it and resumes the run. It
	// returns the record as written. ErrFenced, and nothing written, if
	// the record or the step is in another state, or the lease is live
	// without Force.
	StepResolve(ctx context.Context, p StepResolveParams) (idemtype.Record, error)
	// StepRuns returns up to limit records, in progress or parked, that
	// have step rows (runs stopped between steps), most recently updated
	// first, for operators. It reads from the step rows, which exist only
	// for unfinished runs, not from every record.
	StepRuns(ctx context.Context, limit int) ([]idemtype.Record, error)
}

// StepResolveParams is an operator's decision about one started step of a
// run whose outcome is unknown.
type StepResolveParams struct {
	Scope, Key string
	// Name is the step's name.
	Name string
	// Done records the step as done with Result (JSON); false deletes its
	// row, so that the resumed run calls it again with the same step key.
	Done   bool
	Result []byte
	// Force allows resolving a step of an in-progress record whose lease is
	// still live; its holder is fenced out.
	Force bool
}
