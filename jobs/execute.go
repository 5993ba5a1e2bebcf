package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
)

// finishTimeout bounds the client's own write that ends a job.
const finishTimeout = 30 * time.Second

// maxErrorLen bounds the error text stored per attempt.
const maxErrorLen = 2000

// execute runs the job's worker under a heartbeated lease, then ends the
// claim: complete, retry, dead-letter or release. Every write here is
// fenced; one that finds the lease lost changes nothing.
func (ex *execution) execute() {
	c := ex.c
	ctx, cancel := context.WithCancelCause(c.workCtx)
	defer cancel(nil)
	if c.cfg.JobTimeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, c.cfg.JobTimeout, fmt.Errorf("jobs: job timeout %v passed", c.cfg.JobTimeout))
		defer stop()
	}
	ex.ctx, ex.cancel = ctx, cancel
	ex.hb.Start(ctx, c.cfg.Lease, ex.claimSent, ex) // the lease was granted after the claim was sent
	err := ex.run(ctx)
	ex.ran.Store(max(int64(time.Since(ex.started)), 1))
	ex.p.ending(ex)
	ex.hb.Stop()
	cause := context.Cause(ctx)

	if ex.ended.Swap(true) {
		return // Stop handed the job back already
	}
	// Each write below bounds itself by finishTimeout (the finisher, the
	// reads after a fenced write): no timer per job here. bg carries the
	// values of Start's context, as the job's context does.
	bg := c.bgCtx
	var sz *snooze
	switch {
	case err == nil && ex.completedTx.Load():
		crashpoint.Hit(crashpoint.JobAfterCommit)
		ex.confirm(bg)
	case err == nil:
		crashpoint.Hit(crashpoint.JobAfterCommit)
		ex.finish(bg, driver.FinishJobParams{State: idemtype.JobCompleted, Result: ex.resultBytes()}, "completed")
	case errors.As(err, &sz):
		ex.finish(bg, driver.FinishJobParams{State: idemtype.JobAvailable, Delay: sz.after, Snooze: true}, "snoozed",
			slog.Duration("snooze", sz.after))
	case errors.Is(cause, ErrStopped):
		ex.release(bg)
	case errors.Is(cause, ErrCancelled):
		// The claim ended with the cancel: any write would be refused.
		ex.observe("", RunCancelled)
		ex.emitCancelled()
		ex.log(bg, slog.LevelInfo, "job cancelled while it ran", slog.String("error", err.Error()))
	default:
		if errors.Is(cause, ErrLeaseLost) {
			ex.log(bg, slog.LevelWarn, "job ended after its lease was lost", slog.String("error", err.Error()))
		}
		ex.fail(bg, err)
	}
}

// run calls the worker, turning a panic into an error.
func (ex *execution) run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	r, ok := ex.c.cfg.Workers.byKind[ex.rec.Kind]
	if !ok {
		return fmt.Errorf("no worker registered for kind %q in client %s", ex.rec.Kind, ex.c.cfg.ID)
	}
	ex.vctx = execCtx{ctx, ex}
	return r(&ex.vctx, ex)
}

// execCtx is a job's context as its worker sees it: ctx carrying the
// execution under execKey (for RecordOutput), as context.WithValue would,
// kept in the execution rather than allocated apart.
type execCtx struct {
	context.Context
	ex *execution
}

// Value returns the execution for execKey, and ctx's values otherwise.
func (c *execCtx) Value(key any) any {
	if key == (execKey{}) {
		return c.ex
	}
	return c.Context.Value(key)
}

// fail retries the job after backoff, or dead-letters it when the error is
// permanent or the attempts are used up.
func (ex *execution) fail(ctx context.Context, err error) {
	msg := err.Error()
	if msg == "" { // an empty error would read as a release (see finishEnds)
		msg = fmt.Sprintf("%T with an empty message", err)
	}
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "…"
	}
	p := driver.FinishJobParams{State: idemtype.JobAvailable, Error: msg}
	var ra *retryAfter
	switch {
	case idem.IsPermanent(err):
		p.State = idemtype.JobDead
	case ex.fence.Attempt >= ex.rec.MaxAttempts:
		p.State = idemtype.JobDead
	case errors.As(err, &ra):
		p.Delay = ra.after
	default:
		p.Delay = max(ex.c.cfg.Backoff(ex.fence.Attempt), 0)
	}
	if p.State == idemtype.JobDead {
		ex.finish(ctx, p, "dead-lettered", slog.String("error", msg))
		return
	}
	ex.finish(ctx, p, "failed; retry scheduled", slog.String("error", msg), slog.Duration("retry_in", p.Delay))
}

// release puts a job back without counting a failure.
func (ex *execution) release(ctx context.Context) {
	ex.finish(ctx, driver.FinishJobParams{State: idemtype.JobAvailable}, "released")
}

func (ex *execution) finish(ctx context.Context, p driver.FinishJobParams, what string, attrs ...slog.Attr) {
	p.JobFence = ex.fence
	err := ex.c.finisher.finish(ctx, ex, p)
	switch {
	case errors.Is(err, driver.ErrFenced) && ex.cancelled(ctx):
		ex.observe("", RunCancelled)
		ex.emitCancelled()
		ex.log(ctx, slog.LevelInfo, "job cancelled before it could be "+what, attrs...)
	case errors.Is(err, driver.ErrFenced):
		ex.observe("", RunLeaseLost)
		ex.log(ctx, slog.LevelWarn, "lease lost before the job could be "+what+"; another worker owns it", attrs...)
	case err != nil:
		ex.observe("", RunError)
		// Unknown outcome: if the write did not happen, the lease ends and
		// the job is rescued.
		ex.log(ctx, slog.LevelError, "recording the job as "+what+" failed; it will be rescued after its lease",
			append(attrs, slog.String("write_error", err.Error()))...)
	default:
		ex.observe(finishEnds(p))
		ex.emitFinish(p)
		level := slog.LevelDebug
		if p.State != idemtype.JobCompleted {
			level = slog.LevelInfo
		}
		if p.State == idemtype.JobDead {
			level = slog.LevelWarn
		}
		ex.log(ctx, level, "job "+what, attrs...)
	}
}

// confirm checks that the transaction CompleteTx wrote into committed. If
// the handler rolled it back and still returned nil, the job is still ours
// and running: it is retried, never marked done without its effect.
func (ex *execution) confirm(ctx context.Context) {
	read, cancel := context.WithTimeout(ctx, finishTimeout)
	row, err := ex.c.drv.GetJob(read, ex.rec.ID)
	cancel()
	switch {
	case err != nil:
		ex.observe("", RunError)
		ex.log(ctx, slog.LevelError, "cannot confirm CompleteTx; if it did not commit, the job is rescued after its lease", slog.String("error", err.Error()))
	case row.Attempt != ex.fence.Attempt || row.LeaseID != ex.fence.LeaseID:
		ex.observe("", RunLeaseLost)
		ex.log(ctx, slog.LevelWarn, "job re-claimed by another worker before CompleteTx committed")
	case row.State == idemtype.JobCompleted:
		ex.observe(TransitionCompleted, RunSucceeded)
		ex.c.emitRow(EventCompleted, row, ex.runTime())
		ex.log(ctx, slog.LevelDebug, "job completed")
	case row.State == idemtype.JobRunning:
		ex.fail(ctx, errors.New("the worker returned nil, but the transaction passed to CompleteTx did not commit"))
	default:
		ex.observe("", RunLeaseLost)
		ex.log(ctx, slog.LevelWarn, "job left running state before CompleteTx committed", slog.String("state", string(row.State)))
	}
}

// finishEnds names, for Metrics, the end of a claim that p wrote.
func finishEnds(p driver.FinishJobParams) (to, outcome string) {
	switch {
	case p.State == idemtype.JobCompleted:
		return TransitionCompleted, RunSucceeded
	case p.State == idemtype.JobDead:
		return TransitionDead, RunDead
	case p.Snooze:
		return TransitionSnoozed, RunSnoozed
	case p.Error == "":
		return TransitionReleased, RunReleased
	}
	return TransitionRetryable, RunRetry
}
