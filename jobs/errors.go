package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemdev/idem"
)

// Errors to branch on with errors.Is. Bad arguments are *idem.InputError,
// matching idem.ErrInvalid.
var (
	// ErrLeaseLost is idem.ErrLeaseLost: a fenced write (CompleteTx, or the
	// client's own completion, retry or heartbeat) changed nothing because
	// the job's lease ended or another worker re-claimed it. A handler that
	// gets it from CompleteTx must roll back its transaction.
	ErrLeaseLost = idem.ErrLeaseLost
	// ErrUnknownQueue means a queue was not declared in Config.Queues. The
	// error also matches idem.ErrInvalid.
	ErrUnknownQueue = errors.New("jobs: unknown queue")
	// ErrNotFound means there is no job with the id (it may have been
	// pruned).
	ErrNotFound = errors.New("jobs: job not found")
	// ErrWrongState means an operator action does not apply to the job's
	// state (Requeue and Discard act on dead jobs only).
	ErrWrongState = errors.New("jobs: job is in the wrong state for this")
	// ErrStopped means the client is stopping or stopped.
	ErrStopped = errors.New("jobs: client stopped")
	// ErrCancelled is the cause of a running job's context once Cancel
	// cancelled the job (its heartbeat finds out, within Lease/3). The
	// job's completion is refused from the moment Cancel returned.
	ErrCancelled = errors.New("jobs: job cancelled")
)

// queueError is an unknown queue: it matches ErrUnknownQueue and
// idem.ErrInvalid.
type queueError struct {
	queue string
	known []string
}

func (e *queueError) Error() string {
	return fmt.Sprintf("jobs: unknown queue %q: declare it in Config.Queues (declared: %s)", e.queue, strings.Join(e.known, ", "))
}

func (e *queueError) Is(target error) bool {
	return target == ErrUnknownQueue || target == idem.ErrInvalid
}

func inputErr(field, format string, args ...any) error {
	return &idem.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Permanent wraps err so that the job is dead-lettered at once instead of
// retried: for failures no retry can cure (bad arguments, a 4xx answer).
func Permanent(err error) error { return idem.Permanent(err) }

// snooze is the error Snooze returns.
type snooze struct{ after time.Duration }

func (s *snooze) Error() string { return fmt.Sprintf("jobs: snoozed for %v", s.after) }

// Snooze, returned by Work, puts the job back to run after d (0: at once)
// without spending an attempt: the job's MaxAttempts grows by one, since
// its Attempt, the fencing token, never goes back. No error is recorded.
// Like every write a holder makes, the snooze is fenced: a worker that
// lost its lease snoozes nothing, and the job stays with whoever holds it.
// A job may snooze any number of times; the backoff of a later failure is
// still counted from its Attempt.
func Snooze(d time.Duration) error { return &snooze{after: max(d, 0)} }

// retryAfter is an error that overrides the backoff.
type retryAfter struct {
	after time.Duration
	err   error
}

func (r *retryAfter) Error() string { return r.err.Error() }
func (r *retryAfter) Unwrap() error { return r.err }

// RetryAfter wraps err so that the retry happens after d (for example a
// receiver's Retry-After) instead of after the backoff. It still counts as
// an attempt; at the attempt limit the job is dead-lettered as usual.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfter{after: max(d, 0), err: err}
}
