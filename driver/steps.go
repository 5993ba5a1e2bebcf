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
}
