package idemhttp

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/keepalive"
)

// serveLease is the lease-bound mode: claim, run the handler under a
// heartbeated lease, record, answer.
// start is when the middleware took the request, for AddedLatency.
func (g *guard) serveLease(w http.ResponseWriter, r *http.Request, next http.Handler, op idem.Op, start time.Time) {
	deadline := time.Now().Add(g.cfg.waitTimeout)
	base := context.WithoutCancel(r.Context()) // every ledger call below is detached from the client
	for {
		ctx, cancel := ledgerContext(base)
		sent := time.Now() // the lease starts no earlier
		c, err := g.l.Claim(ctx, op)
		cancel()
		if err == nil && c.Outcome.Held() {
			if took := g.runLease(w, r, base, next, c, sent); took > 0 && g.cfg.addedLatency != nil {
				g.cfg.addedLatency(max(time.Since(start)-took, 0))
			}
			return
		}
		if g.waitable(c, err) && g.waitFor(r.Context(), op, deadline) {
			continue
		}
		g.answer(w, r, op, c, err)
		return
	}
}

// leaseRun is a guarded request's state while its handler runs under a
// lease, in one allocation: the handler's control, which is its context
// too, and the loop that heartbeats the lease, whose Holder it is.
type leaseRun struct {
	ctl   control
	lost  context.CancelCauseFunc // cancels ctl's context
	alive keepalive.Loop
}

// Heartbeat extends the claim's lease.
func (lr *leaseRun) Heartbeat(ctx context.Context) error {
	return lr.ctl.l.Heartbeat(ctx, lr.ctl.claim)
}

// Fenced reports whether another attempt took the key.
func (lr *leaseRun) Fenced(err error) bool { return errors.Is(err, idem.ErrLeaseLost) }

// Lost cancels the handler's context with idem.ErrLeaseLost: the lease is
// lost (the process paused past its lease and another took the key) or can
// no longer be trusted (no heartbeat got through for a whole lease).
func (lr *leaseRun) Lost(error) { lr.lost(fmt.Errorf("idemhttp: %w", idem.ErrLeaseLost)) }

// Failed ignores a heartbeat that failed short of losing the lease: the
// next one retries.
func (lr *leaseRun) Failed(error) {}

// runLease runs the handler under c and settles the key; it returns how long
// a forwarded call's upstream took (0 for a handler). base is r's context
// without its cancellation, for the ledger calls.
func (g *guard) runLease(w http.ResponseWriter, r *http.Request, base context.Context, next http.Handler, c *idem.Claim, sent time.Time) (upstream time.Duration) {
	lr := new(leaseRun)
	ctl := &lr.ctl
	ctl.l, ctl.claim = g.l, c
	var cancel context.CancelCauseFunc
	ctl.Context, cancel = context.WithCancelCause(r.Context())
	defer cancel(nil)
	lr.lost = cancel
	// Heartbeats while the handler runs (see internal/keepalive).
	lr.alive.Start(base, c.Op.Lease, sent, lr)
	rec := newRecorder(w, g.cfg.maxResponse, g.cfg.spillDir, true)
	rec.proxy = g.fwd != nil
	defer rec.close()
	if c.Outcome == idem.Reclaimed {
		g.logOp(r.Context(), slog.LevelInfo, "handling a reclaimed key again", c.Op, c.Token)
	}

	returned := false
	defer func() {
		if returned {
			return
		}
		v := recover() // nil when the handler called runtime.Goexit
		lr.alive.Stop()
		g.afterPanic(r, base, c, ctl, rec, v)
		if v != nil {
			panic(v)
		}
	}()
	upstream = g.handle(rec, r.WithContext(ctl), next, ctl)
	returned = true
	lr.alive.Stop()
	if rec.spillErr != nil {
		g.warnSpill(r.Context(), c.Op, c.Token, rec.spillErr)
	}

	crashpoint.Hit(crashpoint.AfterCall)
	if g.finishLease(base, c, g.decide(ctl, rec), rec) {
		// The answer came after the lease was lost: another attempt owns
		// the key, and what it holds (a reclaim's answer, a parked claim)
		// is what every retry gets. Sending this answer would tell the
		// client something the key does not say.
		rec.discard()
		WriteProblem(w, Problem{Type: ProblemLeaseLost, Title: "Took longer than the lease", Status: http.StatusServiceUnavailable,
			Detail:     "The answer came after the request's lease ended, so it was not recorded. Retry with the same key: you get what the key holds now.",
			RetryAfter: 1})
		return upstream
	}
	rec.send()
	return upstream
}

// afterPanic settles a key whose handler panicked (a proxy aborting a
// broken upstream body panics with http.ErrAbortHandler). If the client
// already got the status, the handler did answer: the key is done, not
// replayable. Otherwise the outcome is unknown and the claim is left to its
// lease.
func (g *guard) afterPanic(r *http.Request, base context.Context, c *idem.Claim, ctl *control, rec *recorder, v any) {
	if !rec.held() {
		g.finishLease(base, c, g.decide(ctl, rec), rec)
		return
	}
	g.logOp(r.Context(), slog.LevelWarn, "handler panicked; outcome unknown, claim left to its lease", c.Op, c.Token, slog.Any("panic", v))
}

// finishLease records the decided action. It runs detached from the
// client (base is the request's context without its cancellation), so a
// client that went away cannot stop it half way. It reports whether a
// response it was to store was refused because the lease was lost.
func (g *guard) finishLease(base context.Context, c *idem.Claim, act action, rec *recorder) (fenced bool) {
	ctx, cancel := ledgerContext(base)
	defer cancel()
	status := cmp.Or(rec.status, http.StatusOK)
	var err error
	switch act {
	case actRelease:
		err = g.l.Release(ctx, c)
		g.logOp(ctx, slog.LevelInfo, "key released", c.Op, c.Token, slog.Int("status", status))
	case actLeave:
		g.logOp(ctx, slog.LevelWarn, "outcome unknown; claim left to its lease", c.Op, c.Token, slog.Int("status", status))
		return false
	case actNotStored:
		why := rec.notStoredReason()
		err = g.complete(ctx, nil, c, notStoredResult(status, why))
		g.logOp(ctx, slog.LevelInfo, "response not stored", c.Op, c.Token, slog.Int("status", status), slog.String("why", why))
	default:
		status, h := rec.result()
		var body []byte
		if body, err = rec.load(ctx); err == nil {
			err = g.complete(ctx, nil, c, g.cfg.storedResult(status, h, body))
			if err != nil && !errors.Is(err, idem.ErrLeaseLost) {
				rec.retain() // the write may still be queued with body
			}
		}
		rec.stored()
	}
	switch {
	case errors.Is(err, idem.ErrLeaseLost) && act == actStore:
		g.logOp(ctx, slog.LevelWarn, "lease lost before the response was recorded; a later attempt owns the key; answered 503 lease-lost", c.Op, c.Token, slog.Int("status", status))
		return true
	case errors.Is(err, idem.ErrLeaseLost):
		g.logOp(ctx, slog.LevelWarn, "lease lost before the response was recorded; a later attempt owns the key", c.Op, c.Token)
	case err != nil && act == actRelease:
		g.logOp(ctx, slog.LevelError, "releasing the key failed; the claim ends with its lease", c.Op, c.Token, slog.Any("err", err))
	case err != nil:
		g.logOp(ctx, slog.LevelError, "response delivered but not recorded; the claim ends with its lease, then the stale-claim policy applies",
			c.Op, c.Token, slog.Int("status", status), slog.String("stale", c.Op.Stale.String()), slog.Any("err", err))
		if g.cfg.recordFailed != nil {
			g.cfg.recordFailed()
		}
	}
	return false
}

// complete records a response: a success below 400, a (replayed)
// failure from 400 on. With tx it writes inside the transaction.
func (g *guard) complete(ctx context.Context, tx *sql.Tx, c *idem.Claim, res idem.Result) error {
	if tx != nil {
		if res.Status >= 400 {
			return g.l.FailTx(ctx, tx, c, res)
		}
		return g.l.CompleteTx(ctx, tx, c, res)
	}
	if res.Status >= 400 {
		return g.l.Fail(ctx, c, res)
	}
	return g.l.Complete(ctx, c, res)
}
