package idemhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/idemhttp"
)

// stepHandler books an order in steps: a row (transaction step), a charge
// at a provider that deduplicates on the step key (external step), then a
// confirmation that fails while fail says so.
type stepHandler struct {
	l       *idem.Ledger
	mu      sync.Mutex
	charges map[string]int // provider calls by step key
	fail    func(w http.ResponseWriter, r *http.Request) bool
}

func (h *stepHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	run, err := idemhttp.Steps(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	q := `INSERT INTO orders (key) VALUES (?)`
	if h.l.Driver().Name() == "postgres" {
		q = postgres.Rebind(q)
	}
	order, err := idem.TxStep(run, "order", func(ctx context.Context, tx *sql.Tx) (string, error) {
		_, err := tx.ExecContext(ctx, q, r.Header.Get("Idempotency-Key"))
		return "order-1", err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	ch, err := idem.CallStep(run, "charge", func(ctx context.Context, key string) (string, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.charges[key]++
		return "ch_1", nil
	}, idem.StepLookup(func(ctx context.Context, key string) (string, idem.Verdict, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.charges[key] > 0 {
			return "ch_1", idem.VerdictDone, nil
		}
		return "", idem.VerdictNotDone, nil
	}))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if h.fail != nil && h.fail(w, r) {
		return
	}
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(order + " " + ch))
}

func (h *stepHandler) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.charges {
		n += c
	}
	return n
}

func orders(t *testing.T, l *idem.Ledger) int {
	var n int
	if err := l.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSteps: a handler with steps whose first attempt fails after its
// charge (503, or an outcome left to the lease) is resumed by the retry:
// the order row and the charge happen once, and the retry gets the
// handler's answer instead of 409.
func TestSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(w http.ResponseWriter, r *http.Request) bool
	}{
		{"ServerError", func(w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, "confirmation service down", http.StatusServiceUnavailable)
			return true
		}},
		{"LeftToLease", func(w http.ResponseWriter, r *http.Request) bool {
			idemhttp.Unknown(r.Context())
			http.Error(w, "timed out", http.StatusGatewayTimeout)
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, l *idem.Ledger) {
				if _, err := l.DB().ExecContext(t.Context(), `CREATE TABLE orders (key TEXT NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				var failed atomic.Bool
				h := &stepHandler{l: l, charges: map[string]int{}, fail: func(w http.ResponseWriter, r *http.Request) bool {
					if failed.Swap(true) {
						return false
					}
					return tc.fail(w, r)
				}}
				// The lease is short, so that the retry after LeftToLease
				// comes soon, and long enough for heartbeats under -race.
				srv := serve(t, idemhttp.Middleware(l, &idemhttp.Options{Lease: 2 * time.Second, Logger: quiet})(h))
				first := do(t, "POST", srv.URL, `{}`, "Idempotency-Key: k1")
				if first.status < 500 || !failed.Load() {
					t.Fatalf("first attempt: %d %q", first.status, first.body)
				}
				var got reply
				for range 400 {
					got = do(t, "POST", srv.URL, `{}`, "Idempotency-Key: k1")
					if got.status != http.StatusConflict {
						break
					}
					time.Sleep(50 * time.Millisecond) // the lease of the first attempt
				}
				if got.status != http.StatusCreated || got.body != "order-1 ch_1" {
					t.Fatalf("retry: %d %q", got.status, got.body)
				}
				if n := orders(t, l); n != 1 {
					t.Fatalf("%d orders, want 1", n)
				}
				if n := h.calls(); n != 1 {
					t.Fatalf("%d provider calls, want 1 (checkpointed)", n)
				}
				replay := do(t, "POST", srv.URL, `{}`, "Idempotency-Key: k1")
				if replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("replay: %d %v", replay.status, replay.header)
				}
				if steps, err := l.Driver().StepList(t.Context(), onlyScope(t, l), "k1"); err != nil || len(steps) != 0 {
					t.Fatalf("step records after the stored answer: %v, %v", steps, err)
				}
			})
		})
	}
}

func TestStepsOutsideLeaseMode(t *testing.T) {
	if _, err := idemhttp.Steps(context.Background()); !errors.Is(err, idemhttp.ErrNoSteps) {
		t.Fatalf("%v, want ErrNoSteps", err)
	}
}

// scope finds the one scope the ledger holds records in.
func onlyScope(t *testing.T, l *idem.Ledger) string {
	var s string
	if err := l.DB().QueryRowContext(t.Context(), `SELECT scope FROM idem_keys LIMIT 1`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
