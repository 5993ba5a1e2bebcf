package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// Complete records a held claim as succeeded with its result. Retries get
// the result until retention ends. ErrLeaseLost means the claim was no
// longer held (lease ended, or a newer token took the key): nothing was
// written and the caller must not report success.
//
// If Complete returns another error, the write may or may not have
// committed; a retry of the whole operation with the same key finds out.
func (l *Ledger) Complete(ctx context.Context, c *Claim, r Result) error {
	return l.finish(ctx, driver.Shared, c, idemtype.StateSucceeded, r)
}

// CompleteTx is Complete inside the caller's transaction: the caller's
// local effect and the done mark commit together or not at all. The fence
// is checked inside tx; on PostgreSQL it locks the record until tx ends.
func (l *Ledger) CompleteTx(ctx context.Context, tx Tx, c *Claim, r Result) error {
	ex, err := l.executor(tx)
	if err != nil {
		return err
	}
	return l.finish(ctx, ex, c, idemtype.StateSucceeded, r)
}

// Fail records a held claim as failed permanently: the result is stored and
// replayed to retries like a success. Use Release for failures a retry may
// cure.
func (l *Ledger) Fail(ctx context.Context, c *Claim, r Result) error {
	return l.finish(ctx, driver.Shared, c, idemtype.StateFailed, r)
}

// FailTx is Fail inside the caller's transaction.
func (l *Ledger) FailTx(ctx context.Context, tx Tx, c *Claim, r Result) error {
	ex, err := l.executor(tx)
	if err != nil {
		return err
	}
	return l.finish(ctx, ex, c, idemtype.StateFailed, r)
}

// Release gives a held claim up without a result: the next claim starts
// clean (Acquired, token+1), with any fingerprint. Use it when the effect
// certainly did not happen.
func (l *Ledger) Release(ctx context.Context, c *Claim) error {
	return l.finish(ctx, driver.Shared, c, idemtype.StateReleased, Result{})
}

// Park records that a held claim's outcome is unknown. Nobody runs it again
// until an operator resolves it (idem reconcile).
func (l *Ledger) Park(ctx context.Context, c *Claim) error {
	return l.finish(ctx, driver.Shared, c, idemtype.StateParked, Result{})
}

// Heartbeat extends a held claim's lease by its lease duration, from the
// database clock. ErrLeaseLost if the claim is no longer held.
func (l *Ledger) Heartbeat(ctx context.Context, c *Claim) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	until, err := l.drv.Heartbeat(ctx, c.fence(), c.Op.Lease)
	if errors.Is(err, driver.ErrFenced) {
		l.observe(ctx, Event{Kind: EventLeaseLost, Op: c.Op, Attempt: c.Token})
		l.logOp(ctx, slog.LevelWarn, "lease lost at heartbeat", c.Op, c.Token)
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("idem: heartbeat %s: %w", l.keyName(c.Op.Key), err)
	}
	c.LeaseUntil = until
	return nil
}

func checkHeld(c *Claim) error {
	if c == nil || !c.Outcome.Held() {
		return &InputError{Field: "claim", Reason: "is not held (outcome must be acquired or reclaimed)"}
	}
	return nil
}

func (l *Ledger) finish(ctx context.Context, ex driver.Executor, c *Claim, st idemtype.State, r Result) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	if c.run != nil && c.run.rows && st == idemtype.StateReleased {
		// A run with checkpoints is never released: the next claim
		// resumes it instead (see Steps).
		l.endLease(ctx, c)
		return nil
	}
	start := time.Now()
	err := l.drv.Finish(ctx, ex, driver.FinishParams{
		Fence: c.fence(), State: st, Status: r.Status, Meta: r.Meta, Body: r.Body,
	})
	if errors.Is(err, driver.ErrFenced) {
		l.observe(ctx, Event{Kind: EventLeaseLost, Op: c.Op, Attempt: c.Token, State: st})
		l.logOp(ctx, slog.LevelWarn, "lease lost at finish", c.Op, c.Token, slog.String("state", string(st)))
		return ErrLeaseLost
	}
	l.observe(ctx, Event{Kind: EventFinish, Op: c.Op, Attempt: c.Token, State: st, Took: time.Since(start), Err: err})
	if err != nil {
		return fmt.Errorf("idem: finish %s as %s: %w", l.keyName(c.Op.Key), st, err)
	}
	if c.run != nil && c.run.rows && (st == idemtype.StateSucceeded || st == idemtype.StateFailed) {
		// In the caller's transaction the step records go with the
		// result; otherwise just after it: rows left by a crash in between
		// belong to a finished key, and the key's next life deletes them.
		if err := l.drv.StepDelete(ctx, ex, c.Op.Scope, c.Op.Key); err != nil && ex != driver.Shared {
			return err
		}
	}
	return nil
}
