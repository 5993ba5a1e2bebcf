package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// waitable reports whether a claim that found the key in flight should
// wait for it.
func (g *guard) waitable(c *idem.Claim, err error) bool {
	return err == nil && c.Outcome == idem.InFlight && g.cfg.onConflict == Wait
}

// waitFor polls the record (reads only) until the key is no longer in
// flight under a live lease, the deadline passes or the client goes away.
// It reports whether to claim again.
func (g *guard) waitFor(ctx context.Context, op idem.Op, deadline time.Time) bool {
	delay := 10 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		rec, err := g.l.Get(ctx, op.Scope, op.Key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			return true
		case err == nil && (rec.State != idemtype.StateInProgress || rec.Stale()):
			return true
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}

// answer responds to a claim that did not give the key to this request.
func (g *guard) answer(w http.ResponseWriter, r *http.Request, op idem.Op, c *idem.Claim, err error) {
	ctx := r.Context()
	if err != nil {
		var ce *idem.ConflictError
		switch {
		case errors.Is(err, idem.ErrExpired) && errors.As(err, &ce):
			g.logOp(ctx, slog.LevelInfo, "retry of an expired key", op, ce.Record.Attempt)
			WriteProblem(w, Problem{Type: ProblemKeyExpired, Title: "Idempotency key expired", Status: http.StatusGone,
				Detail: fmt.Sprintf("A request with this key was handled on %s; its response is no longer kept. It will not be handled again; use a new key for a new request.",
					ce.Record.CompletedAt.UTC().Format(time.RFC3339))})
		case errors.Is(err, idem.ErrInvalid):
			WriteProblem(w, Problem{Type: ProblemKeyInvalid, Title: "Invalid idempotency key", Status: http.StatusBadRequest, Detail: err.Error()})
		default:
			g.logOp(ctx, slog.LevelError, "ledger unavailable; request not handled", op, 0, slog.Any("err", err))
			WriteProblem(w, Problem{Type: ProblemLedgerUnavailable, Title: "Idempotency ledger unavailable", Status: http.StatusServiceUnavailable,
				Detail: "The request was not handled. Retry with the same key.", RetryAfter: 1})
		}
		return
	}
	switch c.Outcome {
	case idem.Replay:
		g.logOp(ctx, slog.LevelDebug, "replayed", op, c.Record.Attempt, slog.Int("status", c.Result.Status))
		writeReplay(w, r, c.Result)
	case idem.InFlight:
		g.logOp(ctx, slog.LevelDebug, "in flight", op, c.Record.Attempt)
		WriteProblem(w, Problem{Type: ProblemInFlight, Title: "Request in flight", Status: http.StatusConflict,
			Detail: "A request with this key is being handled. Retry later with the same key to get its response.", RetryAfter: 1})
	case idem.Mismatch:
		g.logOp(ctx, slog.LevelInfo, "key reused with a different request", op, c.Record.Attempt, slog.String("stored_fingerprint", c.Record.Fingerprint))
		WriteProblem(w, Problem{Type: ProblemKeyMismatch, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
			Detail: "This key was used for a different request (method, path, query or body). Nothing was done; use a new key for a new request."})
	case idem.Parked:
		g.logOp(ctx, slog.LevelWarn, "parked key retried", op, c.Record.Attempt)
		WriteProblem(w, Problem{Type: ProblemParked, Title: "Outcome unknown", Status: http.StatusConflict,
			Detail: "The first request with this key may or may not have taken effect, and waits for an operator to decide. It will not be handled again until then."})
	default:
		WriteProblem(w, Problem{Type: ProblemLedgerUnavailable, Title: "Unexpected claim outcome", Status: http.StatusInternalServerError, Detail: c.Outcome.String()})
	}
}
