package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/internal/pgtest"
)

// stepClock is an injected database clock that moves only when told.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// runFixture is one database with the tables a ride booking writes: rides
// (a transaction step's effect, no unique key so a duplicate shows) and
// provider (a payment provider that deduplicates on the step key and
// counts calls).
type runFixture struct {
	t     *testing.T
	url   string
	l     *idem.Ledger
	clock *stepClock
}

func dbURL(t *testing.T, drv string) string {
	if drv == "postgres" {
		return pgtest.NewDB(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
}

// eachRunDriver runs fn on SQLite and PostgreSQL, with an injected clock.
func eachRunDriver(t *testing.T, fn func(t *testing.T, f *runFixture)) {
	for _, drv := range ledgertest.Drivers {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f := &runFixture{t: t, url: dbURL(t, drv), clock: &stepClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
			f.l = f.open(f.clock.Now)
			createRideTables(t, f.l)
			fn(t, f)
		})
	}
}

func (f *runFixture) open(clock func() time.Time) *idem.Ledger {
	f.t.Helper()
	l, err := dburl.Open(f.t.Context(), f.url, &idem.Options{Logger: slog.New(slog.DiscardHandler), Clock: clock})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { l.Close() })
	return l
}

func createRideTables(t testing.TB, l *idem.Ledger) {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS rides (key TEXT NOT NULL, attempt INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS receipts (key TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS provider (key TEXT PRIMARY KEY, calls INTEGER NOT NULL)`,
	} {
		if _, err := l.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

func rebindFor(l *idem.Ledger, q string) string {
	if l.Driver().Name() == "postgres" {
		return postgres.Rebind(q)
	}
	return q
}

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func count(t tb, l *idem.Ledger, q string, args ...any) int {
	t.Helper()
	var n int
	if err := l.DB().QueryRowContext(context.Background(), rebindFor(l, q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// charge is the fake provider's charge: one per key, however often called.
func charge(ctx context.Context, l *idem.Ledger, key string) (string, error) {
	_, err := l.DB().ExecContext(ctx, rebindFor(l, `INSERT INTO provider (key, calls) VALUES (?, 1)
	ON CONFLICT (key) DO UPDATE SET calls = provider.calls + 1`), key)
	return "ch_" + key[len(key)-6:], err
}

// findCharge is the provider's lookup by key.
func findCharge(l *idem.Ledger) func(ctx context.Context, key string) (string, idem.Verdict, error) {
	return func(ctx context.Context, key string) (string, idem.Verdict, error) {
		var n int
		err := l.DB().QueryRowContext(ctx, rebindFor(l, `SELECT count(*) FROM provider WHERE key = ?`), key).Scan(&n)
		if err != nil {
			return "", idem.VerdictUnknown, err
		}
		if n == 0 {
			return "", idem.VerdictNotDone, nil
		}
		return "ch_" + key[len(key)-6:], idem.VerdictDone, nil
	}
}

type ride struct {
	ID     string
	Amount int
}

// hooks lets a test fail or block a booking at a step.
type hooks struct {
	beforeCharge    func() error                                // in the charge step, before the provider call
	afterCharge     func() error                                // in the charge step, after the provider call
	receipt         func() error                                // in the receipt step, before its write
	receiptTx       func(ctx context.Context, tx *sql.Tx) error // in the receipt step, after its write
	noLookup        bool
	lookupOverwrite func(ctx context.Context, key string) (string, idem.Verdict, error)
}

// book is the run under test: a ride row (transaction step), a charge
// (external step with the provider's lookup), a receipt (transaction step).
func book(l *idem.Ledger, op idem.Op, h hooks) idem.RunFunc {
	return func(r *idem.Run) (idem.Result, error) {
		rd, err := idem.TxStep(r, "create-ride", func(ctx context.Context, tx *sql.Tx) (ride, error) {
			_, err := tx.ExecContext(ctx, rebindFor(l, `INSERT INTO rides (key, attempt) VALUES (?, 1)`), op.Key)
			return ride{ID: "ride-" + op.Key, Amount: 1200}, err
		})
		if err != nil {
			return idem.Result{}, err
		}
		var opts []idem.StepOption[string]
		switch {
		case h.lookupOverwrite != nil:
			opts = append(opts, idem.StepLookup(h.lookupOverwrite))
		case !h.noLookup:
			opts = append(opts, idem.StepLookup(findCharge(l)))
		}
		ch, err := idem.CallStep(r, "charge", func(ctx context.Context, key string) (string, error) {
			if h.beforeCharge != nil {
				if err := h.beforeCharge(); err != nil {
					return "", err
				}
			}
			id, err := charge(ctx, l, key)
			if err == nil && h.afterCharge != nil {
				err = h.afterCharge()
			}
			return id, err
		}, opts...)
		if err != nil {
			return idem.Result{}, err
		}
		_, err = idem.TxStep(r, "receipt", func(ctx context.Context, tx *sql.Tx) (bool, error) {
			if h.receipt != nil {
				if err := h.receipt(); err != nil {
					return false, err
				}
			}
			_, err := tx.ExecContext(ctx, rebindFor(l, `INSERT INTO receipts (key) VALUES (?)`), op.Key)
			if err == nil && h.receiptTx != nil {
				err = h.receiptTx(ctx, tx)
			}
			return true, err
		})
		if err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Status: 201, Body: []byte(rd.ID + " " + ch)}, nil
	}
}

// effects returns the rows, receipts and distinct charges of key, and the
// provider calls.
func effects(t tb, l *idem.Ledger, key string) (rides, receipts, charges, calls int) {
	sk := idem.StepKey("", key, "charge")
	return count(t, l, `SELECT count(*) FROM rides WHERE key = ?`, key),
		count(t, l, `SELECT count(*) FROM receipts WHERE key = ?`, key),
		count(t, l, `SELECT count(*) FROM provider WHERE key = ?`, sk),
		count(t, l, `SELECT coalesce(sum(calls), 0) FROM provider WHERE key = ?`, sk)
}

func wantOnce(t testing.TB, l *idem.Ledger, key string) {
	t.Helper()
	rides, receipts, charges, _ := effects(t, l, key)
	if rides != 1 || receipts != 1 || charges != 1 {
		t.Fatalf("key %s: %d rides, %d receipts, %d charges; want one of each", key, rides, receipts, charges)
	}
}

var errFlaky = errors.New("flaky")

func TestRun(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "ride-1", Fingerprint: "fp"}
		res, err := f.l.Run(ctx, op, book(f.l, op, hooks{}))
		if err != nil || res.Status != 201 || res.Replayed {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		wantOnce(t, f.l, op.Key)
		again, err := f.l.Run(ctx, op, book(f.l, op, hooks{}))
		if err != nil || !again.Replayed || string(again.Body) != string(res.Body) {
			t.Fatalf("replay: %+v, %v; want %q replayed", again, err, res.Body)
		}
		wantOnce(t, f.l, op.Key)
		if _, err := f.l.Run(ctx, idem.Op{Key: op.Key, Fingerprint: "other"}, book(f.l, op, hooks{})); !errors.Is(err, idem.ErrMismatch) {
			t.Fatalf("other fingerprint: %v, want ErrMismatch", err)
		}
		// The steps' records went with the commit that stored the result.
		if steps, err := f.l.Driver().StepList(ctx, "", op.Key); err != nil || len(steps) != 0 {
			t.Fatalf("steps after completion: %v, %v", steps, err)
		}
	})
}

// TestRunResume: a run whose step fails keeps its checkpoints and ends its
// lease; the retry resumes after the last checkpoint, running no step twice.
func TestRunResume(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "ride-2", Fingerprint: "fp"}
		_, err := f.l.Run(ctx, op, book(f.l, op, hooks{receipt: func() error { return errFlaky }}))
		if !errors.Is(err, errFlaky) {
			t.Fatalf("first attempt: %v, want %v", err, errFlaky)
		}
		rec, err := f.l.Get(ctx, "", op.Key)
		if err != nil || rec.State != idemtype.StateInProgress || !rec.Stale() {
			t.Fatalf("after a failed step: %+v, %v; want in progress with its lease ended", rec, err)
		}
		res, err := f.l.Run(ctx, op, book(f.l, op, hooks{}))
		if err != nil || res.Status != 201 {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		wantOnce(t, f.l, op.Key)
		if _, _, _, calls := effects(t, f.l, op.Key); calls != 1 {
			t.Fatalf("%d provider calls, want 1 (the charge was checkpointed)", calls)
		}
	})
}

// TestRunNothingCheckpointed: a run that fails before any step releases
// its key, as Do does.
func TestRunNothingCheckpointed(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		_, err := f.l.Run(ctx, op, func(r *idem.Run) (idem.Result, error) { return idem.Result{}, errFlaky })
		if !errors.Is(err, errFlaky) {
			t.Fatal(err)
		}
		if rec, err := f.l.Get(ctx, "", op.Key); err != nil || rec.State != idemtype.StateReleased {
			t.Fatalf("%+v, %v; want released", rec, err)
		}
	})
}

// TestRunPermanent: a Permanent error records the failure; retries get it.
func TestRunPermanent(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		_, err := f.l.Run(ctx, op, book(f.l, op, hooks{receipt: func() error { return idem.Permanent(errors.New("card declined")) }}))
		if !errors.Is(err, idem.ErrFailed) {
			t.Fatalf("%v, want ErrFailed", err)
		}
		_, err = f.l.Run(ctx, op, book(f.l, op, hooks{}))
		if !errors.Is(err, idem.ErrFailed) {
			t.Fatalf("retry: %v, want the stored failure", err)
		}
		if _, receipts, _, _ := effects(t, f.l, op.Key); receipts != 0 {
			t.Fatal("receipt written by a failed run")
		}
	})
}

// TestRunLookup: a charge started but not checkpointed (the holder died
// during the call) is decided by the lookup on resume.
func TestRunLookup(t *testing.T) {
	cases := []struct {
		name      string
		charged   bool // the provider call happened before the holder died
		h         hooks
		wantErr   error
		wantCalls int
	}{
		{"DoneNotCalledAgain", true, hooks{}, nil, 1},
		{"NotDoneCalledWithTheSameKey", false, hooks{}, nil, 1},
		{"KeyHonouredRedo", true, hooks{lookupOverwrite: func(context.Context, string) (string, idem.Verdict, error) {
			return "", idem.VerdictNotDone, nil
		}}, nil, 2},
		{"UnknownParks", true, hooks{lookupOverwrite: func(context.Context, string) (string, idem.Verdict, error) {
			return "", idem.VerdictUnknown, nil
		}}, idem.ErrParked, 1},
		{"NoLookupParks", true, hooks{noLookup: true}, idem.ErrParked, 1},
		{"FailedFailsTheRun", true, hooks{lookupOverwrite: func(context.Context, string) (string, idem.Verdict, error) {
			return "", idem.VerdictFailed, nil
		}}, idem.ErrFailed, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachRunDriver(t, func(t *testing.T, f *runFixture) {
				ctx := t.Context()
				op := idem.Op{Key: "ride-" + tc.name, Fingerprint: "fp"}
				first := hooks{beforeCharge: func() error { return errFlaky }}
				if tc.charged {
					first = hooks{afterCharge: func() error { return errFlaky }}
				}
				if _, err := f.l.Run(ctx, op, book(f.l, op, first)); !errors.Is(err, errFlaky) {
					t.Fatalf("first attempt: %v", err)
				}
				res, err := f.l.Run(ctx, op, book(f.l, op, tc.h))
				if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && res.Status != 201) {
					t.Fatalf("resume: %+v, %v; want %v", res, err, tc.wantErr)
				}
				rides, receipts, charges, calls := effects(t, f.l, op.Key)
				if rides != 1 || charges != 1 || calls != tc.wantCalls {
					t.Fatalf("%d rides, %d charges, %d calls; want 1, 1, %d", rides, charges, calls, tc.wantCalls)
				}
				if tc.wantErr != nil {
					if receipts != 0 {
						t.Fatalf("%d receipts after %v", receipts, tc.wantErr)
					}
					// Nobody runs it again on their own.
					if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{})); !errors.Is(err, tc.wantErr) {
						t.Fatalf("after %v: %v", tc.wantErr, err)
					}
					return
				}
				wantOnce(t, f.l, op.Key)
			})
		})
	}
}

// TestRunParkedReleased: an operator who releases a parked run says the
// parked call did not happen; the next attempt resumes, calling it again
// with the same key, and runs no earlier step twice.
func TestRunParkedReleased(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		f.l.Run(ctx, op, book(f.l, op, hooks{beforeCharge: func() error { return errFlaky }}))
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true})); !errors.Is(err, idem.ErrParked) {
			t.Fatalf("%v, want parked", err)
		}
		if _, err := f.l.Resolve(ctx, "", op.Key, idem.Resolution{As: idemtype.StateReleased}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true})); err != nil {
			t.Fatal(err)
		}
		wantOnce(t, f.l, op.Key)
	})
}

// TestRunCodeChanged: a resumed run whose code has another step order
// parks with ErrStepOrder instead of guessing.
func TestRunCodeChanged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
	}{
		{"Renamed", []string{"a", "c", "d"}},
		{"Removed", []string{"a"}},
		{"Reordered", []string{"b", "a", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachRunDriver(t, func(t *testing.T, f *runFixture) {
				ctx := t.Context()
				op := idem.Op{Key: "k", Fingerprint: "fp"}
				run := func(names []string, fail error) idem.RunFunc {
					return func(r *idem.Run) (idem.Result, error) {
						for _, n := range names {
							if _, err := idem.TxStep(r, n, func(context.Context, *sql.Tx) (string, error) { return n, nil }); err != nil {
								return idem.Result{}, err
							}
						}
						return idem.Result{}, fail
					}
				}
				if _, err := f.l.Run(ctx, op, run([]string{"a", "b"}, errFlaky)); !errors.Is(err, errFlaky) {
					t.Fatal(err)
				}
				_, err := f.l.Run(ctx, op, run(tc.steps, nil))
				if !errors.Is(err, idem.ErrStepOrder) || !errors.Is(err, idem.ErrParked) {
					t.Fatalf("%v; want ErrStepOrder and ErrParked", err)
				}
				t.Log(err)
			})
		})
	}
}

// TestRunStaleHolderRefused: a holder paused past its lease (the clock
// jumps; its heartbeats are not due) loses the key to a resumer; its
// transaction step's checkpoint, and so its write, is refused.
func TestRunStaleHolderRefused(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp", Lease: time.Hour}
		inReceipt, resume := make(chan struct{}), make(chan struct{})
		stale := make(chan error, 1)
		go func() {
			_, err := f.l.Run(ctx, op, book(f.l, op, hooks{receipt: func() error {
				close(inReceipt)
				<-resume
				return nil
			}}))
			stale <- err
		}()
		<-inReceipt
		if f.l.Driver().Name() == "sqlite" {
			// The paused holder's transaction holds SQLite's only writer: on
			// SQLite a pause inside a transaction step stops every writer
			// until it ends, so the successor can only come after it.
			f.clock.Advance(2 * time.Hour)
			close(resume)
			if err := <-stale; !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("stale holder: %v, want ErrLeaseLost", err)
			}
		} else {
			f.clock.Advance(2 * time.Hour)
			if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{})); err != nil {
				t.Fatalf("successor: %v", err)
			}
			close(resume)
			if err := <-stale; !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("stale holder: %v, want ErrLeaseLost", err)
			}
		}
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{})); err != nil {
			t.Fatal(err)
		}
		wantOnce(t, f.l, op.Key)
	})
}

// TestRunRacingResumers: many resumers of one abandoned run; one runs the
// remaining steps, the others see it in flight or replay its result.
func TestRunRacingResumers(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{afterCharge: func() error { return errFlaky }})); !errors.Is(err, errFlaky) {
			t.Fatal(err)
		}
		const n = 8
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := f.l.Run(ctx, op, book(f.l, op, hooks{}))
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		ok := 0
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, idem.ErrInFlight):
			default:
				t.Errorf("resumer: %v", err)
			}
		}
		if ok == 0 {
			t.Fatal("no resumer finished the run")
		}
		wantOnce(t, f.l, op.Key)
	})
}

// TestRunStepResultTooLarge: a result over the cap fails the run clearly
// and permanently.
func TestRunStepResultTooLarge(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		_, err := f.l.Run(t.Context(), idem.Op{Key: "k"}, func(r *idem.Run) (idem.Result, error) {
			_, err := idem.CallStep(r, "big", func(context.Context, string) ([]byte, error) {
				return make([]byte, idem.MaxStepResultLen), nil
			})
			return idem.Result{}, err
		})
		if !errors.Is(err, idem.ErrStepResult) || !errors.Is(err, idem.ErrFailed) {
			t.Fatalf("%v; want ErrStepResult, ErrFailed", err)
		}
	})
}

// TestRunIgnoredStepError: a run body that ignores a step's error still
// fails: nothing is completed past a step that did not checkpoint.
func TestRunIgnoredStepError(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		_, err := f.l.Run(t.Context(), idem.Op{Key: "k"}, func(r *idem.Run) (idem.Result, error) {
			idem.TxStep(r, "a", func(context.Context, *sql.Tx) (int, error) { return 1, nil })
			idem.TxStep(r, "a", func(context.Context, *sql.Tx) (int, error) { return 2, nil }) // name used twice
			return idem.Result{Status: 200}, nil
		})
		if !errors.Is(err, idem.ErrInvalid) || !errors.Is(err, idem.ErrFailed) {
			t.Fatalf("%v; want ErrInvalid, ErrFailed", err)
		}
	})
}

func TestStepKey(t *testing.T) {
	a, b := idem.StepKey("s", "k", "charge"), idem.StepKey("s", "k", "refund")
	if a == b || a != idem.StepKey("s", "k", "charge") || idem.StepKey("sk", "", "charge") == idem.StepKey("s", "k", "charge") {
		t.Fatalf("step keys %q %q: want stable and distinct", a, b)
	}
	if len(a) != 45 {
		t.Fatalf("%q: %d bytes", a, len(a))
	}
}

// TestCompleter: a registered run abandoned after its charge is driven to
// completion by a completer, without its client; the client's late retry
// replays the result.
func TestCompleter(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		runs := idem.NewRuns()
		var fail bool
		var mu sync.Mutex
		booking := idem.AddRun(runs, "book-ride", func(r *idem.Run, in ride) (idem.Result, error) {
			mu.Lock()
			h := hooks{}
			if fail {
				h.receipt = func() error { return errFlaky }
			}
			mu.Unlock()
			return book(r.Context().Value(ledgerKey{}).(*idem.Ledger), r.Op(), h)(r)
		})
		ctx = context.WithValue(ctx, ledgerKey{}, f.l)
		op := idem.Op{Key: "ride-c", Fingerprint: "fp"}
		fail = true
		if _, err := booking.Run(ctx, f.l, op, ride{ID: "r", Amount: 5}); !errors.Is(err, errFlaky) {
			t.Fatal(err)
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		c := idem.NewCompleter(f.l, runs, nil)
		n, err := c.CompleteOnce(ctx)
		if err != nil || n != 1 {
			t.Fatalf("CompleteOnce: %d, %v; want 1 run finished", n, err)
		}
		wantOnce(t, f.l, op.Key)
		if n, err := c.CompleteOnce(ctx); err != nil || n != 0 {
			t.Fatalf("second sweep: %d, %v", n, err)
		}
		res, err := booking.Run(ctx, f.l, op, ride{ID: "r", Amount: 5})
		if err != nil || !res.Replayed || res.Status != 201 {
			t.Fatalf("client retry: %+v, %v", res, err)
		}
	})
}

type ledgerKey struct{}

// TestRunParkedStepResolved: an operator resolves the parked charge step.
// Done: the resumed run returns the operator's result without calling the
// provider. Not done: a Completer resumes the registered run, which calls
// the provider again with the same step key.
func TestRunParkedStepResolved(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k-done", Fingerprint: "fp"}
		f.l.Run(ctx, op, book(f.l, op, hooks{afterCharge: func() error { return errFlaky }}))
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true})); !errors.Is(err, idem.ErrParked) {
			t.Fatalf("%v, want parked", err)
		}
		rec, err := f.l.ResolveStep(ctx, "", op.Key, idem.StepResolution{Step: "charge", As: idem.VerdictDone, Result: []byte(`"ch_manual"`)})
		if err != nil || rec.State != idemtype.StateInProgress {
			t.Fatalf("ResolveStep: %+v, %v", rec, err)
		}
		res, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true}))
		if err != nil || string(res.Body) != "ride-k-done ch_manual" {
			t.Fatalf("resumed run: %q, %v; want the operator's charge", res.Body, err)
		}
		if _, _, _, calls := effects(t, f.l, op.Key); calls != 1 {
			t.Fatalf("%d provider calls, want 1 (the resolved step is not called again)", calls)
		}
		wantOnce(t, f.l, op.Key)

		runs := idem.NewRuns()
		booking := idem.AddRun(runs, "book-ride", func(r *idem.Run, in ride) (idem.Result, error) {
			return book(f.l, r.Op(), hooks{noLookup: true})(r)
		})
		op = idem.Op{Key: "k-notdone", Fingerprint: "fp"}
		flaky := hooks{beforeCharge: func() error { return errFlaky }}
		if _, err := idem.AddRun(idem.NewRuns(), "book-ride", func(r *idem.Run, in ride) (idem.Result, error) {
			return book(f.l, r.Op(), flaky)(r)
		}).Run(ctx, f.l, op, ride{}); !errors.Is(err, errFlaky) {
			t.Fatal(err)
		}
		c := idem.NewCompleter(f.l, runs, nil)
		if n, err := c.CompleteOnce(ctx); n != 0 || err != nil {
			t.Fatalf("sweep before resolve: %d, %v; want the run parked", n, err)
		}
		if rec, _ := f.l.Get(ctx, "", op.Key); rec.State != idemtype.StateParked {
			t.Fatalf("record %s, want parked", rec.State)
		}
		if _, err := f.l.ResolveStep(ctx, "", op.Key, idem.StepResolution{Step: "charge", As: idem.VerdictNotDone}); err != nil {
			t.Fatal(err)
		}
		if n, err := c.CompleteOnce(ctx); n != 1 || err != nil {
			t.Fatalf("sweep after resolve: %d, %v; want the run finished", n, err)
		}
		wantOnce(t, f.l, op.Key)
		res, err = booking.Run(ctx, f.l, op, ride{})
		if err != nil || !res.Replayed {
			t.Fatalf("client retry: %+v, %v", res, err)
		}
	})
}

// TestRunParkedResolvedSucceeded: a parked run resolved as a whole
// (succeeded) loses its step records, as a run that finishes itself does;
// a retry replays the operator's result.
func TestRunParkedResolvedSucceeded(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		ctx := t.Context()
		op := idem.Op{Key: "k", Fingerprint: "fp"}
		f.l.Run(ctx, op, book(f.l, op, hooks{afterCharge: func() error { return errFlaky }}))
		if _, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true})); !errors.Is(err, idem.ErrParked) {
			t.Fatalf("%v, want parked", err)
		}
		if steps, _ := f.l.RunSteps(ctx, "", op.Key); len(steps) != 2 {
			t.Fatalf("parked run has %d step records, want 2", len(steps))
		}
		if _, err := f.l.Resolve(ctx, "", op.Key, idem.Resolution{As: idemtype.StateSucceeded, Result: idem.Result{Status: 201, Body: []byte("by hand")}}); err != nil {
			t.Fatal(err)
		}
		if steps, err := f.l.RunSteps(ctx, "", op.Key); err != nil || len(steps) != 0 {
			t.Fatalf("after resolve: %d step records, %v; want none", len(steps), err)
		}
		res, err := f.l.Run(ctx, op, book(f.l, op, hooks{noLookup: true}))
		if err != nil || !res.Replayed || string(res.Body) != "by hand" {
			t.Fatalf("retry: %+v, %v", res, err)
		}
	})
}
