package idemhttp

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/crashpoint"
)

// serveTx is the transaction-bound mode: begin, claim in the transaction,
// run the handler with it, record the response in it, commit, answer.
func (g *guard) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, op idem.Op) {
	deadline := time.Now().Add(g.cfg.waitTimeout)
	for {
		// The transaction outlives the client: a disconnect must not roll
		// back a handler that finished. Its lifetime is bounded by the
		// lease below, past which CompleteTx would be refused anyway.
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		// On SQLite the transaction holds idem's writer (queued in Go) until
		// it ends; ending it gives the writer back, before the response goes
		// to a client that may be slow.
		sqlTx, end, err := g.l.Driver().Begin(ctx)
		if err != nil {
			cancel()
			g.answer(w, r, op, nil, err)
			return
		}
		tx := &ledgerTx{Tx: sqlTx, end: end}
		c, err := g.l.ClaimTx(ctx, sqlTx, op)
		if err == nil && c.Outcome.Held() {
			timer := time.AfterFunc(c.Op.Lease+time.Second, cancel)
			g.runTx(ctx, w, r, next, tx, c)
			timer.Stop()
			cancel()
			return
		}
		tx.Rollback()
		cancel()
		if g.waitable(c, err) && g.waitFor(r.Context(), op, deadline) {
			continue
		}
		g.answer(w, r, op, c, err)
		return
	}
}

func (g *guard) runTx(ctx context.Context, w http.ResponseWriter, r *http.Request, next http.Handler, tx *ledgerTx, c *idem.Claim) {
	ctl := &control{Context: r.Context(), claim: c, tx: tx.Tx}
	rec := newRecorder(w, g.cfg.maxResponse, g.cfg.spillDir, false)
	defer rec.close()
	defer tx.Rollback() // after a commit, a no-op; after a panic, the claim goes with the effects

	next.ServeHTTP(rec, r.WithContext(ctl))
	crashpoint.Hit(crashpoint.AfterCall)
	if rec.spillErr != nil {
		g.warnSpill(ctx, c.Op, c.Token, rec.spillErr)
	}

	status := cmp.Or(rec.status, http.StatusOK)
	var res idem.Result
	switch act := g.decide(ctl, rec); act {
	case actRelease, actLeave:
		// Rolled back: the effects and the claim are gone, so the outcome
		// is known after all (nothing happened) and a retry starts clean.
		tx.Rollback()
		g.logOp(ctx, slog.LevelInfo, "rolled back; key free", c.Op, c.Token, slog.Int("status", status))
		rec.send()
		return
	case actNotStored:
		res = notStoredResult(status, rec.notStoredReason())
	default:
		s, h := rec.result()
		body, err := rec.load(ctx)
		if err != nil {
			g.txRecordFailed(ctx, w, tx, rec, c, err)
			return
		}
		res = g.cfg.storedResult(s, h, body)
	}

	err := g.complete(ctx, tx.Tx, c, res)
	rec.stored() // in a transaction the write is done when it returns
	if err != nil && !errors.Is(err, idem.ErrLeaseLost) && status >= 400 {
		// The handler's own failure most likely broke the transaction (on
		// PostgreSQL a failed statement aborts it). Nothing commits, so its
		// error answer is true as it stands; the key is free.
		tx.Rollback()
		g.logOp(ctx, slog.LevelInfo, "transaction unusable after an error answer; rolled back, key free", c.Op, c.Token, slog.Int("status", status), slog.Any("err", err))
		rec.send()
		return
	}
	if err != nil {
		g.txRecordFailed(ctx, w, tx, rec, c, err)
		return
	}
	crashpoint.Hit(crashpoint.BeforeCommit)
	if err := tx.Commit(); err != nil {
		rec.discard()
		g.logOp(ctx, slog.LevelError, "commit failed; outcome unknown", c.Op, c.Token, slog.Any("err", err))
		WriteProblem(w, Problem{Type: ProblemOutcomeUnknown, Title: "Outcome unknown", Status: http.StatusServiceUnavailable,
			Detail: "The commit may or may not have happened. Retry with the same key: you get the stored response, or the request is handled afresh.", RetryAfter: 1})
		return
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	rec.send()
}

// txRecordFailed rolls back a transaction whose response could not be
// recorded (its lease ended, the ledger failed, or a spilled body could
// not be read back) and answers with the problem that says so.
func (g *guard) txRecordFailed(ctx context.Context, w http.ResponseWriter, tx *ledgerTx, rec *recorder, c *idem.Claim, err error) {
	tx.Rollback()
	rec.discard()
	if errors.Is(err, idem.ErrLeaseLost) {
		g.logOp(ctx, slog.LevelWarn, "lease ended before commit; rolled back", c.Op, c.Token)
		WriteProblem(w, Problem{Type: ProblemLeaseLost, Title: "Took longer than the lease", Status: http.StatusServiceUnavailable,
			Detail: "The request took longer than its lease allows; nothing was committed. Retry with the same key.", RetryAfter: 1})
		return
	}
	g.logOp(ctx, slog.LevelError, "recording the response failed; rolled back", c.Op, c.Token, slog.Any("err", err))
	WriteProblem(w, Problem{Type: ProblemLedgerUnavailable, Title: "Idempotency ledger unavailable", Status: http.StatusServiceUnavailable,
		Detail: "Nothing was committed. Retry with the same key.", RetryAfter: 1})
}

// ledgerTx is a transaction from Driver.Begin that gives idem's writer back
// (on SQLite) as soon as it commits or rolls back.
type ledgerTx struct {
	*sql.Tx
	end   func()
	ended bool
}

// Commit commits and ends the transaction.
func (t *ledgerTx) Commit() error {
	err := t.Tx.Commit()
	t.finish()
	return err
}

// Rollback rolls back (a no-op after Commit) and ends the transaction.
func (t *ledgerTx) Rollback() error {
	err := t.Tx.Rollback()
	t.finish()
	return err
}

func (t *ledgerTx) finish() {
	if !t.ended {
		t.ended = true
		t.end()
	}
}
