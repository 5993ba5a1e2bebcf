package idemhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// payments is a handler writing one row per charge with the middleware's
// transaction.
func payments(t *testing.T, l *idem.Ledger) (http.Handler, func() int) {
	t.Helper()
	db := l.Driver().DB()
	if _, err := db.Exec(`CREATE TABLE charges (k TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := idemhttp.Tx(r.Context())
		if tx == nil {
			t.Error("no transaction in the request context")
			return
		}
		var in struct{ Amount int }
		json.NewDecoder(r.Body).Decode(&in)
		if d, _ := time.ParseDuration(r.Header.Get("Sleep")); d > 0 {
			time.Sleep(d)
		}
		_, err := tx.ExecContext(context.WithoutCancel(r.Context()), `INSERT INTO charges (k, amount) VALUES ($1, $2)`, r.Header.Get("Idempotency-Key"), in.Amount)
		if err != nil {
			http.Error(w, "duplicate charge: "+err.Error(), http.StatusConflict)
			return
		}
		switch r.URL.Path {
		case "/fail":
			http.Error(w, "failed after writing", http.StatusInternalServerError)
			return
		case "/panic":
			panic("boom")
		case "/big":
			w.Write([]byte(strings.Repeat("b", 50_000)))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charged":`+strconv.Itoa(in.Amount)+`,"at":"`+time.Now().Format(time.RFC3339Nano)+`"}`)
	})
	rows := func() int {
		var n int
		if err := l.Driver().DB().QueryRow(`SELECT count(*) FROM charges`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return h, rows
}

func txGuarded(t *testing.T, l *idem.Ledger, opts *idemhttp.Options, h http.Handler) string {
	t.Helper()
	if opts == nil {
		opts = &idemhttp.Options{}
	}
	opts.Logger = quiet
	mw, err := idemhttp.NewTx(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, mw(h)).URL
}

func TestTxEffectAndResponseCommitTogether(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, nil, h)
		first := do(t, "POST", url, `{"amount":5}`, "Idempotency-Key: k")
		if first.status != 201 || rows() != 1 {
			t.Fatalf("first: %d %q, %d rows", first.status, first.body, rows())
		}
		again := do(t, "POST", url, `{"amount":5}`, "Idempotency-Key: k")
		if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || rows() != 1 {
			t.Fatalf("replay: %d %q, %d rows", again.status, again.body, rows())
		}
		wantProblem(t, do(t, "POST", url, `{"amount":6}`, "Idempotency-Key: k"), 422, idemhttp.ProblemKeyMismatch)
	})
}

// Concurrent duplicates wait for the first commit (a row lock on
// PostgreSQL, the single writer on SQLite) and get its response.
func TestTxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, nil, h)
		const n = 20
		var wg sync.WaitGroup
		replies := make([]reply, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				replies[i] = do(t, "POST", url, `{"amount":7}`, "Idempotency-Key: k", "Sleep: 20ms")
			})
		}
		close(start)
		wg.Wait()
		for _, r := range replies {
			if r.status != 201 || r.body != replies[0].body {
				t.Fatalf("replies differ: %d %q vs %q", r.status, r.body, replies[0].body)
			}
		}
		if rows() != 1 {
			t.Fatalf("%d rows, want 1", rows())
		}
	})
}

func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, nil, h)
		if r := do(t, "POST", url+"/fail", `{"amount":1}`, "Idempotency-Key: f"); r.status != 500 {
			t.Fatalf("got %d", r.status)
		}
		if rows() != 0 {
			t.Fatal("a 5xx committed its effect")
		}
		req, _ := http.NewRequest("POST", url+"/panic", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "p")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		if rows() != 0 || len(records(t, l)) != 0 {
			t.Fatalf("a panic left %d rows and %d records", rows(), len(records(t, l)))
		}
		// Both keys start clean.
		if r := do(t, "POST", url, `{"amount":1}`, "Idempotency-Key: p"); r.status != 201 || rows() != 1 {
			t.Fatalf("retry after panic: %d, %d rows", r.status, rows())
		}
	})
}

// A handler whose statement failed answers its error; on PostgreSQL the
// transaction is aborted and nothing is stored, on SQLite the answer is
// stored. Either way the client gets the handler's answer, never a 5xx.
func TestTxHandlerError(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, _ := payments(t, l)
		if _, err := l.Driver().DB().Exec(`INSERT INTO charges (k, amount) VALUES ('dup', 1)`); err != nil {
			t.Fatal(err)
		}
		url := txGuarded(t, l, nil, h)
		for range 2 {
			if r := do(t, "POST", url, `{"amount":1}`, "Idempotency-Key: dup"); r.status != 409 {
				t.Fatalf("got %d %q, want the handler's 409", r.status, r.body)
			}
		}
	})
}

func TestTxLargeResponse(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, &idemhttp.Options{MaxResponse: 1000}, h)
		r := do(t, "POST", url+"/big", `{"amount":1}`, "Idempotency-Key: big")
		if r.status != 200 || len(r.body) != 50_000 || rows() != 1 {
			t.Fatalf("got %d, %d bytes, %d rows", r.status, len(r.body), rows())
		}
		wantProblem(t, do(t, "POST", url+"/big", `{"amount":1}`, "Idempotency-Key: big"), 410, idemhttp.ProblemResponseNotStored)
	})
}

func TestTxLeaseBoundsTheHandler(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, &idemhttp.Options{Lease: 100 * time.Millisecond}, h)
		wantProblem(t, do(t, "POST", url, `{"amount":1}`, "Idempotency-Key: slow", "Sleep: 300ms"), 503, idemhttp.ProblemLeaseLost)
		if rows() != 0 {
			t.Fatal("an effect committed past the lease")
		}
	})
}

// The client leaves; the handler finishes and commits; the retry replays.
func TestTxClientDisconnect(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h, rows := payments(t, l)
		url := txGuarded(t, l, nil, h)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"amount":3}`))
		req.Header.Set("Idempotency-Key", "gone")
		req.Header.Set("Sleep", "200ms")
		if _, err := http.DefaultClient.Do(req); err == nil {
			t.Fatal("not cancelled")
		}
		var r reply
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if r = do(t, "POST", url, `{"amount":3}`, "Idempotency-Key: gone"); r.header.Get("Idempotent-Replayed") == "true" {
				break
			}
		}
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || rows() != 1 {
			t.Fatalf("retry: %d %v, %d rows", r.status, r.header, rows())
		}
	})
}
