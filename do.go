package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/keepalive"
)

// Func is the work Do runs once. It writes its local effect with tx; what
// it returns is stored as the result body and replayed to retries. An
// error releases the key for a retry, unless wrapped with Permanent, which
// records a failure that is replayed instead.
//
// ctx is cancelled, with the cause ErrLeaseLost, once the claim's lease
// is lost or can no longer be trusted (no heartbeat got through for a whole
// lease; see docs/contract.md, "Keep-alive").
type Func func(ctx context.Context, tx *sql.Tx) ([]byte, error)

// Do runs fn at most once for op, and returns its result; retries get the
// stored result with Replayed set.
//
// The claim is taken first, in its own short write, under a lease that Do
// heartbeats while fn runs. fn then runs inside a transaction that also
// writes the done mark, so the effect and the mark commit together: a crash
// before that commit leaves neither, and the key is claimable again after
// its lease. External calls inside fn should pass op.Key downstream, since
// a redo after a crash repeats them.
//
// Errors: a *ConflictError matching ErrInFlight, ErrMismatch, ErrParked or
// ErrExpired when fn was not run; ErrFailed (with the stored result) when
// the key failed permanently before; ErrLeaseLost when the claim was taken
// over before commit (fn's effects rolled back). Any other error from the
// final commit leaves the outcome unknown: retry with the same op.
//
// On SQLite the transaction holds the database's single writer: fn must not
// call other ledger methods, and long work belongs outside Do.
func (l *Ledger) Do(ctx context.Context, op Op, fn Func) (Result, error) {
	c, err := l.Claim(ctx, op)
	if err != nil {
		return Result{}, err
	}
	if res, done, err := l.unheld(c); done {
		return res, err
	}
	crashpoint.Hit(crashpoint.AfterClaim)
	return l.run(ctx, c, fn)
}

func (l *Ledger) run(ctx context.Context, c *Claim, fn Func) (res Result, err error) {
	// Ending the claim must not depend on the caller's context: a client
	// that went away must not leave a key stuck until its lease ends.
	bg := context.WithoutCancel(ctx)
	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.keepAlive(workCtx, c, cancel)
	defer stop()

	// The transaction is not bound to the caller's context, which would roll
	// it back when the client goes away after fn's work is done, leaving the
	// key stuck; fn's own statements use workCtx and still stop on cancel.
	tx, end, err := l.drv.Begin(bg)
	if err != nil {
		l.releaseQuietly(bg, c)
		return Result{}, fmt.Errorf("idem: begin %s: %w", l.keyName(c.Op.Key), err)
	}
	// rollback ends the transaction once; on SQLite it holds idem's writer,
	// which the writes after it (release, fail) need.
	ended := false
	rollback := func() {
		if !ended {
			ended = true
			tx.Rollback()
			end()
		}
	}
	defer func() {
		if ended {
			return
		}
		rollback()
		if p := recover(); p != nil {
			l.releaseQuietly(bg, c)
			panic(p)
		}
	}()

	body, ferr := fn(workCtx, tx)
	if ferr != nil {
		rollback()
		if cause := context.Cause(workCtx); errors.Is(cause, ErrLeaseLost) {
			return Result{}, fmt.Errorf("idem: %s: %w: %w", l.keyName(c.Op.Key), ErrLeaseLost, ferr)
		}
		if IsPermanent(ferr) {
			r := Result{Body: []byte(ferr.Error())}
			if err := l.Fail(bg, c, r); err != nil {
				return Result{}, errors.Join(ferr, err)
			}
			return r, fmt.Errorf("%w: %w", ErrFailed, ferr)
		}
		l.releaseQuietly(bg, c)
		return Result{}, ferr
	}
	r := Result{Body: body}
	if err := l.CompleteTx(bg, tx, c, r); err != nil {
		return Result{}, err // ErrLeaseLost: rolled back by the deferred rollback
	}
	crashpoint.Hit(crashpoint.BeforeCommit)
	stop()
	ended = true
	err = tx.Commit()
	end()
	if err != nil {
		// The commit may have happened: the key is left to its lease, and a
		// retry with the same op finds out.
		return Result{}, fmt.Errorf("idem: commit %s: %w; retry with the same key: %w", l.keyName(c.Op.Key), ErrOutcomeUnknown, err)
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	return r, nil
}

// keepAlive heartbeats c while fn runs (see internal/keepalive), and
// cancels the work with ErrLeaseLost once the lease is lost or can no
// longer be trusted.
func (l *Ledger) keepAlive(ctx context.Context, c *Claim, cancel context.CancelCauseFunc) (stop func()) {
	return keepalive.Start(ctx, keepalive.Config{
		Lease:   c.Op.Lease,
		Granted: c.sent,
		// On SQLite a heartbeat waits for the writer that fn's transaction
		// holds; stop cancels the wait.
		Heartbeat: func(ctx context.Context) error { return l.Heartbeat(ctx, c) },
		Fenced:    func(err error) bool { return errors.Is(err, ErrLeaseLost) },
		Lost:      func(error) { cancel(ErrLeaseLost) },
	})
}

func (l *Ledger) releaseQuietly(ctx context.Context, c *Claim) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = l.Release(ctx, c) // if this fails the lease ends on its own
}

// unheld is what Do and Run answer for a claim that did not make the caller
// its holder (done): a replay's stored result (with ErrFailed for a stored
// failure), or a ConflictError for a key in flight, reused with another
// request or parked.
func (l *Ledger) unheld(c *Claim) (res Result, done bool, err error) {
	switch c.Outcome {
	case Replay:
		if c.Record.State == idemtype.StateFailed {
			return c.Result, true, fmt.Errorf("%w: scope %q key %s", ErrFailed, c.Op.Scope, l.keyName(c.Op.Key))
		}
		return c.Result, true, nil
	case InFlight, Mismatch, Parked:
		return Result{}, true, &ConflictError{Outcome: c.Outcome, Record: c.Record, hashKey: l.hashKeys}
	}
	return Result{}, false, nil
}
