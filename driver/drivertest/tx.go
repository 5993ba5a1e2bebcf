package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// testClaimTx covers the transaction-bound mode: claim, effect and done
// mark in one transaction; a rollback leaves no trace; a concurrent claim
// of the same key waits for the transaction instead of seeing InFlight.
func testClaimTx(t *testing.T, s *suite) {
	t.Run("Commit", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		tx := begin(t, f.ctx, l)
		c, err := l.ClaimTx(f.ctx, tx, op)
		if err != nil || c.Outcome != idem.Acquired || c.Token != 1 {
			t.Fatalf("ClaimTx: %+v, %v; want acquired with token 1", c, err)
		}
		if err := insertEffect(f.ctx, l, tx, "", op.Key, c.Token); err != nil {
			t.Fatal(err)
		}
		if err := l.CompleteTx(f.ctx, tx, c, idem.Result{Status: 201, Body: []byte("one commit")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := mustClaim(t, f.ctx, l, op, idem.Replay); string(r.Result.Body) != "one commit" {
			t.Fatalf("replay %q", r.Result.Body)
		}
		if n := effects(t, l, "")[op.Key]; n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	t.Run("FailTx", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		tx := begin(t, f.ctx, l)
		c, err := l.ClaimTx(f.ctx, tx, op)
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("ClaimTx: %+v, %v", c, err)
		}
		if err := l.FailTx(f.ctx, tx, c, idem.Result{Status: 409, Body: []byte("rejected")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		r := mustClaim(t, f.ctx, l, op, idem.Replay)
		if r.Record.State != idemtype.StateFailed || string(r.Result.Body) != "rejected" || r.Result.Status != 409 {
			t.Fatalf("replay %s %d %q, want the failure", r.Record.State, r.Result.Status, r.Result.Body)
		}
		if err := l.FailTx(f.ctx, nil, c, idem.Result{}); !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("FailTx with a nil tx: %v, want ErrInvalid", err)
		}
	})

	t.Run("Rollback", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		createEffects(t, l)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		tx := begin(t, f.ctx, l)
		c, err := l.ClaimTx(f.ctx, tx, op)
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("ClaimTx: %+v, %v", c, err)
		}
		if err := insertEffect(f.ctx, l, tx, "", op.Key, c.Token); err != nil {
			t.Fatal(err)
		}
		if err := l.CompleteTx(f.ctx, tx, c, idem.Result{Body: []byte("rolled back")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Get(f.ctx, "", op.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("get after rollback: %v, want ErrNotFound", err)
		}
		if n := rowCount(t, l); n != 0 {
			t.Fatalf("%d ledger rows after rollback, want 0", n)
		}
		if n := effects(t, l, "")[op.Key]; n != 0 {
			t.Fatalf("%d effects after rollback, want 0", n)
		}
		if c := mustClaim(t, f.ctx, l, op, idem.Acquired); c.Token != 1 {
			t.Fatalf("claim after rollback: token %d, want 1", c.Token)
		}
	})

	t.Run("RollbackTakeover", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(nil)
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		c := mustClaim(t, f.ctx, l, op, idem.Acquired)
		if err := l.Release(f.ctx, c); err != nil {
			t.Fatal(err)
		}
		before := mustGet(t, f.ctx, l, "", op.Key)
		tx := begin(t, f.ctx, l)
		c2, err := l.ClaimTx(f.ctx, tx, op)
		if err != nil || c2.Outcome != idem.Acquired || c2.Token != 2 {
			t.Fatalf("ClaimTx of a released key: %+v, %v; want acquired with token 2", c2, err)
		}
		tx.Rollback()
		if after := mustGet(t, f.ctx, l, "", op.Key); !sameRecord(before, after) {
			t.Fatalf("rolled-back takeover left a trace:\nbefore %+v\nafter  %+v", before, after)
		}
	})

	for _, commit := range []bool{true, false} {
		name := "ConcurrentCommit"
		if !commit {
			name = "ConcurrentRollback"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := s.setup(t)
			l := f.open(nil)
			createEffects(t, l)
			op := idem.Op{Key: "k", Fingerprint: "fp"}

			tx1 := begin(t, f.ctx, l)
			defer tx1.Rollback()
			c1, err := l.ClaimTx(f.ctx, tx1, op)
			if err != nil || c1.Outcome != idem.Acquired {
				t.Fatalf("first ClaimTx: %+v, %v", c1, err)
			}
			base := l.Driver().DB().Stats().WaitCount
			type result struct {
				c   *idem.Claim
				err error
			}
			done := make(chan result, 1)
			go func() {
				tx2, err := l.Driver().DB().BeginTx(f.ctx, nil)
				if err != nil {
					done <- result{err: err}
					return
				}
				c, err := l.ClaimTx(f.ctx, tx2, op)
				if err == nil && c.Outcome.Held() {
					err = l.CompleteTx(f.ctx, tx2, c, idem.Result{Body: []byte("second")})
				}
				if err == nil {
					err = tx2.Commit()
				} else {
					tx2.Rollback()
				}
				done <- result{c, err}
			}()
			waitBlocked(t, f, l, base)
			select {
			case r := <-done:
				t.Fatalf("second ClaimTx returned %+v, %v while the first transaction was open", r.c, r.err)
			default:
			}

			if commit {
				if err := insertEffect(f.ctx, l, tx1, "", op.Key, c1.Token); err != nil {
					t.Fatal(err)
				}
				if err := l.CompleteTx(f.ctx, tx1, c1, idem.Result{Body: []byte("first")}); err != nil {
					t.Fatal(err)
				}
				if err := tx1.Commit(); err != nil {
					t.Fatal(err)
				}
			} else {
				tx1.Rollback()
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("second ClaimTx: %v", r.err)
			}
			switch {
			case commit && (r.c.Outcome != idem.Replay || string(r.c.Result.Body) != "first"):
				t.Fatalf("second ClaimTx after the first committed: %v %q, want replay of %q", r.c.Outcome, r.c.Result.Body, "first")
			case !commit && (r.c.Outcome != idem.Acquired || r.c.Token != 1):
				t.Fatalf("second ClaimTx after the first rolled back: %v token %d, want acquired with token 1", r.c.Outcome, r.c.Token)
			}
			want := map[bool]int{true: 1, false: 0}[commit]
			if n := effects(t, l, "")[op.Key]; n != want {
				t.Fatalf("%d effects, want %d", n, want)
			}
		})
	}
}

// waitBlocked waits until another session is blocked behind the caller's
// open transaction: on PostgreSQL a backend waiting for a lock, on SQLite a
// request waiting for the single writer connection.
func waitBlocked(t *testing.T, f *fixture, l *idem.Ledger, baseWaits int64) {
	t.Helper()
	db := l.DB()
	if l.Driver().Name() != "postgres" {
		// On SQLite the second transaction waits inside SQLite's busy
		// handler (BEGIN IMMEDIATE on the application's pool), which no
		// statistic shows: give it time to get there. The assertion that
		// follows is that it has not returned, which a slow machine
		// cannot make pass by accident.
		waitFor(t, "the second transaction to start", func() bool { return db.Stats().InUse >= 3 }) // the writer, tx1, tx2
		time.Sleep(100 * time.Millisecond)
		return
	}
	waitFor(t, "the second transaction to block", func() bool {
		var n int
		err := db.QueryRowContext(f.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		return n > 0
	})
}
