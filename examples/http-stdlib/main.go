// Command http-stdlib shows idemhttp on the standard library's ServeMux,
// with both modes side by side:
//
//   - POST /payouts is lease-bound (idemhttp.Middleware): the work is a call
//     to an external bank, so the key is claimed in a short write, the call
//     runs under a heartbeated lease with the key forwarded, and the answer
//     is recorded after.
//
//   - POST /payments is transaction-bound (idemhttp.TxMiddleware): the
//     effect is a row in the same database, so the row, the key's
//     completion and the stored response commit in one transaction.
//
//     go run ./examples/http-stdlib
//     curl -si localhost:8082/payments -H 'Authorization: Bearer sk_test_1' -H 'Idempotency-Key: p-1' -d '{"amount":1000}'
//
// Keys are scoped by the Authorization header (a keyed hash of it); a
// request with a key and no Authorization is refused with 400 scope-missing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8082", "address to serve on")
	db := flag.String("db", "sqlite:http-stdlib.db", "ledger database URL")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	l, err := dburl.Open(ctx, *db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := newHandler(ctx, l, &bank{})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("listening on http://%s", *listen)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

func newHandler(ctx context.Context, l *idem.Ledger, b *bank) (http.Handler, error) {
	// The application's own table lives in the ledger's database, so that
	// the transaction-bound mode can commit it with the key.
	_, err := l.Driver().DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS payments (
		id INTEGER PRIMARY KEY, idempotency_key TEXT NOT NULL, amount INTEGER NOT NULL)`)
	if err != nil {
		return nil, err
	}
	opts := &idemhttp.Options{RequireKey: true}
	mux := http.NewServeMux()
	mux.Handle("POST /payouts", idemhttp.Middleware(l, opts)(payout(b)))
	mux.Handle("POST /payments", idemhttp.TxMiddleware(l, opts)(http.HandlerFunc(payment)))
	return mux, nil
}

// payment writes its effect with the middleware's transaction.
func payment(w http.ResponseWriter, r *http.Request) {
	var in struct{ Amount int64 }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 {
		http.Error(w, `want {"amount": n}`, http.StatusBadRequest)
		return
	}
	tx := idemhttp.Tx(r.Context())
	var id int64
	err := tx.QueryRowContext(r.Context(), `INSERT INTO payments (idempotency_key, amount) VALUES ($1, $2) RETURNING id`,
		idemhttp.Claim(r.Context()).Op.Key, in.Amount).Scan(&id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back, key free
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", id))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": id, "amount": in.Amount})
}

// payout calls the bank, forwarding the key so that the bank can
// deduplicate a redo after a crash.
func payout(b *bank) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Amount int64 }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 {
			http.Error(w, `want {"amount": n}`, http.StatusBadRequest)
			return
		}
		ref, err := b.transfer(r.Context(), r.Header.Get("Idempotency-Key"), in.Amount)
		if err != nil {
			// The bank may or may not have moved the money: say so, and
			// let the claim's lease and the stale policy decide.
			idemhttp.Unknown(r.Context())
			http.Error(w, "bank did not answer", http.StatusGatewayTimeout)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"bank_ref": ref, "amount": in.Amount})
	})
}

// bank stands in for an external API that deduplicates on the key.
type bank struct {
	mu        sync.Mutex
	transfers map[string]string
	moved     int
}

func (b *bank) transfer(ctx context.Context, key string, amount int64) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.transfers == nil {
		b.transfers = map[string]string{}
	}
	if ref, ok := b.transfers[key]; ok {
		return ref, nil
	}
	b.moved++
	ref := fmt.Sprintf("tr_%d", b.moved)
	b.transfers[key] = ref
	return ref, nil
}
