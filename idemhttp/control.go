package idemhttp

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"github.com/idemdev/idem"
)

// verdict is what a handler said about its own outcome.
type verdict int32

const (
	verdictNone    verdict = iota // judge by the response
	verdictRelease                // the effect certainly did not happen
	verdictUnknown                // the effect may or may not have happened
)

// control is what a guarded handler reaches through its request context,
// and that context itself: the request's, which it wraps, with the
// control as the value of controlKey (a context.WithValue saved).
type control struct {
	context.Context
	l       *idem.Ledger // lease-bound mode only: Steps
	claim   *idem.Claim
	tx      *sql.Tx
	verdict atomic.Int32
}

type controlKey struct{}

// Value is the control for controlKey, else the wrapped context's value.
func (c *control) Value(key any) any {
	if _, ok := key.(controlKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func controlFrom(ctx context.Context) *control {
	c, _ := ctx.Value(controlKey{}).(*control)
	return c
}

// Claim returns the claim a guarded handler runs under: its outcome
// (Acquired, or Reclaimed when an earlier attempt's holder vanished and may
// have done part of the work), key and fencing token. Nil outside a guarded
// request. Read Outcome, Op and Token only: the middleware's heartbeat
// updates LeaseUntil concurrently.
func Claim(ctx context.Context) *idem.Claim {
	if c := controlFrom(ctx); c != nil {
		return c.claim
	}
	return nil
}

// Tx returns the transaction of a request guarded by TxMiddleware. The
// handler writes its effects with it; they commit together with the key's
// completion and the stored response, or not at all. The handler must not
// commit or roll it back, and on SQLite must not write through any other
// connection to the same database (the transaction holds its only writer).
// Nil outside transaction-bound mode.
func Tx(ctx context.Context) *sql.Tx {
	if c := controlFrom(ctx); c != nil {
		return c.tx
	}
	return nil
}

// ErrNoSteps is returned by Steps outside a request guarded by the
// lease-bound middleware.
var ErrNoSteps = errors.New("idemhttp: steps need a request guarded by the lease-bound middleware (New)")

// Steps returns the run of a guarded request, so that its handler can
// split the work into steps (idem.TxStep, idem.CallStep): each step is
// checkpointed under the request's key and fencing token. A retry of the
// same key after a crash, a lost lease or a 5xx answer skips the steps
// already done and returns their recorded results, instead of doing them
// again; an answer that releases the key (5xx, Release) keeps the
// checkpoints and lets the next retry resume at once. The response the
// handler writes is stored as usual, and the step records go with it.
//
// The handler must answer a step's error with a failure (5xx resumes on
// retry; an error wrapping idem.ErrParked should answer 409 or 503), never
// with a success. Only the lease-bound middleware (New) has steps: in
// transaction-bound mode the request is one transaction already.
func Steps(ctx context.Context) (*idem.Run, error) {
	c := controlFrom(ctx)
	if c == nil || c.l == nil {
		return nil, ErrNoSteps
	}
	return c.l.Steps(ctx, c.claim)
}

// Release tells the middleware that the guarded request's effect certainly
// did not happen (say, a downstream refused the connection): its response
// goes to the client unstored and the key is released, so a retry starts
// clean. In transaction-bound mode the transaction is rolled back. It
// reports whether ctx belongs to a guarded request.
func Release(ctx context.Context) bool {
	if c := controlFrom(ctx); c != nil {
		c.verdict.Store(int32(verdictRelease))
		return true
	}
	return false
}

// Unknown tells the middleware that the guarded request's effect may or
// may not have happened (say, a downstream timed out after the request was
// sent): its response goes to the client unstored and the claim is left to
// its lease; after that the stale-claim policy decides (by default the next
// retry is handled again with the same key). In transaction-bound mode the
// transaction is rolled back, so the outcome is known after all: nothing
// happened. It reports whether ctx belongs to a guarded request.
func Unknown(ctx context.Context) bool {
	if c := controlFrom(ctx); c != nil {
		c.verdict.Store(int32(verdictUnknown))
		return true
	}
	return false
}
