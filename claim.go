package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// The path of a claim through the code, API to SQL, is in
// docs/architecture.md; driver/drivertest holds the conformance tests that
// every driver passes for it (races, crashes, paused holders, a model).

// Claim is the answer to "may I run this operation?". When Outcome is
// Acquired or Reclaimed the caller holds the key under a lease and must end
// the claim with Complete, Fail or Release (or let the lease run out). For
// the other outcomes, Record is the existing record and, for Replay, Result
// is the stored result.
type Claim struct {
	Outcome Outcome
	// Op is the operation as claimed, with defaults filled in.
	Op Op
	// Token is the fencing token (the attempt number) of a held claim. A
	// holder whose token is no longer the newest cannot write.
	Token int64
	// LeaseUntil is when a held claim's lease ends unless heartbeated, by
	// the database clock.
	LeaseUntil time.Time
	// Record is the ledger record as the claim found or left it.
	Record idemtype.Record
	// Result is the stored result when Outcome is Replay.
	Result Result

	leaseID int64
	// sent is when the claim was asked for: its lease can have started no
	// earlier, so keep-alive counts the lease from here.
	sent time.Time
	// from is the state an Acquired claim took the key from: empty for a
	// new record. A run resumes the steps of a released key only.
	from idemtype.State
	// run is the Run that Ledger.Steps made on this claim: finishing the
	// claim settles its step records.
	run *Run
}

// maxClaimRetries bounds the read-decide-swap loop. Each retry means another
// writer changed the record in between; that cannot go on for long.
const maxClaimRetries = 64

// Claim decides, as one write in the database, whether op may run now.
// Claiming never reads and then inserts: the insert is the check.
//
// Outcomes Acquired and Reclaimed hand over the key with a fencing token;
// Replay, InFlight, Mismatch and Parked do not and carry the existing
// record. A key past retention whose tombstone remains returns a
// *ConflictError matching ErrExpired. A stale claim (lease ended) is
// handled by op's StalePolicy.
//
// If Claim returns any other error the claim may or may not have been
// taken; retry with the same op. A taken claim that nobody completes is
// recoverable after its lease.
func (l *Ledger) Claim(ctx context.Context, op Op) (*Claim, error) {
	op, err := l.withDefaults(op)
	if err != nil {
		return nil, err
	}
	return l.claimObserved(ctx, driver.Shared, op)
}

// ClaimTx is Claim inside the caller's transaction: the claim commits or
// rolls back with tx. This is the transaction-bound mode: while tx is open,
// a concurrent claim of the same key waits for it (a row lock on
// PostgreSQL, the single writer on SQLite) instead of seeing InFlight, and
// a crash before commit leaves no trace, so the next claim starts clean at
// once. Finish a held claim with CompleteTx or FailTx in the same tx. Keep
// tx short: on SQLite it holds the only writer.
func (l *Ledger) ClaimTx(ctx context.Context, tx Tx, op Op) (*Claim, error) {
	ex, err := l.executor(tx)
	if err != nil {
		return nil, err
	}
	op, err = l.withDefaults(op)
	if err != nil {
		return nil, err
	}
	return l.claimObserved(ctx, ex, op)
}

func (l *Ledger) claimObserved(ctx context.Context, ex driver.Executor, op Op) (*Claim, error) {
	start := time.Now()
	c, err := l.claim(ctx, ex, op)
	ev := Event{Kind: EventClaim, Op: op, Took: time.Since(start), Err: err}
	if c != nil {
		c.sent = start
		ev.Outcome, ev.Attempt = c.Outcome, c.Record.Attempt
	} else if ce := (*ConflictError)(nil); errors.As(err, &ce) {
		ev.Outcome, ev.Attempt = ce.Outcome, ce.Record.Attempt
	}
	l.observe(ctx, ev)
	return c, err
}

func (l *Ledger) claim(ctx context.Context, ex driver.Executor, op Op) (*Claim, error) {
	for range maxClaimRetries {
		p := driver.ClaimParams{
			Scope: op.Scope, Key: op.Key, Fingerprint: op.Fingerprint,
			LeaseID: rand.Int64(), Lease: op.Lease, Retention: op.Retention, TombstoneTTL: l.tombstone,
		}
		rec, created, err := l.drv.Claim(ctx, ex, p)
		if errors.Is(err, driver.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("idem: claim %s: %w", l.keyName(op.Key), err)
		}
		if created {
			return l.held(Acquired, op, p.LeaseID, rec), nil
		}
		c, err := l.decide(ctx, ex, op, p, rec)
		if errors.Is(err, driver.ErrConflict) {
			continue
		}
		return c, err
	}
	return nil, fmt.Errorf("idem: claim %s: record changed %d times while deciding; giving up", l.keyName(op.Key), maxClaimRetries)
}

// verdict is what the ledger does with an existing record.
type verdict int

const (
	takeFresh    verdict = iota + 1 // released, or gone past its tombstone: acquire with token+1
	takeStale                       // stale in-progress claim: reclaim with token+1
	parkStale                       // stale in-progress claim under the Park policy
	askStale                        // stale in-progress claim under the StaleReconcile policy
	giveReplay                      // finished and authoritative
	giveInFlight                    // live lease held by another
	giveMismatch                    // different fingerprint
	giveParked                      // parked earlier
	giveExpired                     // finished, past retention, tombstone kept
)

// judge is the whole state machine for an existing record, as a pure
// function of the record (with the database clock) and the request.
func judge(op Op, r idemtype.Record) verdict {
	now := r.Now
	gone := (r.State == idemtype.StateSucceeded || r.State == idemtype.StateFailed || r.State == idemtype.StateTombstone) &&
		!r.TombstoneUntil.IsZero() && !r.TombstoneUntil.After(now)
	switch {
	case r.State == idemtype.StateReleased || gone:
		return takeFresh
	case r.Fingerprint != op.Fingerprint:
		return giveMismatch
	}
	switch r.State {
	case idemtype.StateInProgress:
		if r.LeaseUntil.After(now) {
			return giveInFlight
		}
		switch op.Stale {
		case StalePark:
			return parkStale
		case StaleReconcile:
			return askStale
		default:
			return takeStale
		}
	case idemtype.StateSucceeded, idemtype.StateFailed:
		if r.ExpiresAt.After(now) {
			return giveReplay
		}
		return giveExpired
	case idemtype.StateTombstone:
		return giveExpired
	default: // parked, or a state a newer version wrote: never run it
		return giveParked
	}
}

func (l *Ledger) decide(ctx context.Context, ex driver.Executor, op Op, p driver.ClaimParams, r idemtype.Record) (*Claim, error) {
	v := judge(op, r)
	switch v {
	case takeFresh, takeStale, askStale, parkStale:
		rec, err := l.drv.Takeover(ctx, ex, driver.TakeoverParams{
			ClaimParams: p, FromState: r.State, FromAttempt: r.Attempt, Park: v == parkStale,
		})
		if err != nil {
			return nil, err // ErrConflict: someone moved first; the caller reads again
		}
		switch v {
		case takeFresh:
			c := l.held(Acquired, op, p.LeaseID, rec)
			c.from = r.State
			return c, nil
		case parkStale:
			l.logOp(ctx, slog.LevelWarn, "stale claim parked", op, rec.Attempt)
			return &Claim{Outcome: Parked, Op: op, Record: rec}, nil
		}
		l.logOp(ctx, slog.LevelWarn, "stale claim reclaimed", op, rec.Attempt, slog.Int64("previous_attempt", r.Attempt))
		c := l.held(Reclaimed, op, p.LeaseID, rec)
		if v == askStale {
			return l.reconcileStale(ctx, ex, c)
		}
		return c, nil
	case giveReplay:
		return &Claim{Outcome: Replay, Op: op, Record: r, Result: Result{Status: r.Status, Meta: r.Meta, Body: r.Body, Replayed: true}}, nil
	case giveInFlight:
		return &Claim{Outcome: InFlight, Op: op, Record: r}, nil
	case giveMismatch:
		l.logOp(ctx, slog.LevelDebug, "key reused with a different fingerprint", op, r.Attempt, slog.String("stored_fingerprint", r.Fingerprint))
		return &Claim{Outcome: Mismatch, Op: op, Record: r}, nil
	case giveParked:
		return &Claim{Outcome: Parked, Op: op, Record: r}, nil
	default: // giveExpired
		l.logOp(ctx, slog.LevelWarn, "replay of an expired key", op, r.Attempt)
		return nil, &ConflictError{Outcome: expired, Record: r, hashKey: l.hashKeys}
	}
}

func (l *Ledger) held(o Outcome, op Op, leaseID int64, rec idemtype.Record) *Claim {
	return &Claim{Outcome: o, Op: op, Token: rec.Attempt, LeaseUntil: rec.LeaseUntil, Record: rec, leaseID: leaseID}
}

func (c *Claim) fence() driver.Fence {
	return driver.Fence{Scope: c.Op.Scope, Key: c.Op.Key, Attempt: c.Token, LeaseID: c.leaseID}
}

// logOp writes one line about an operation, carrying scope, key,
// fingerprint and attempt.
func (l *Ledger) logOp(ctx context.Context, level slog.Level, msg string, op Op, attempt int64, attrs ...slog.Attr) {
	if !l.log.Enabled(ctx, level) {
		return
	}
	key := op.Key
	if l.hashKeys {
		key = KeyHash(key)
	}
	base := []slog.Attr{
		slog.String("scope", op.Scope), slog.String("key", key),
		slog.String("fingerprint", op.Fingerprint), slog.Int64("attempt", attempt),
	}
	l.log.LogAttrs(ctx, level, msg, append(base, attrs...)...)
}

// KeyHash is how a key appears in logs under Options.HashKeysInLogs:
// "sha256:" and the first 16 hex digits of the key's SHA-256. It is stable,
// so an operator who knows a key can find its lines (idem keys show prints
// it); it is not a secret, and a short guessable key stays guessable.
func KeyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:8])
}
