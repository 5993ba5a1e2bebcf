package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
)

func exampleLedger() (*idem.Ledger, func()) {
	dir, _ := os.MkdirTemp("", "idemhttp-example-")
	l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(dir, "idem.db"), &idem.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	return l, func() { l.Close(); os.RemoveAll(dir) }
}

func examplePost(url, key, body string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer sk_test_1") // whose key it is: keys are scoped by credential
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		b = []byte(resp.Header.Get("Content-Type"))
	}
	fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
}

// A payout handler behind the lease-bound middleware runs once per key.
func ExampleMiddleware() {
	l, done := exampleLedger()
	defer done()

	payouts := 0
	payout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payouts++ // call the bank here, forwarding r.Header.Get("Idempotency-Key")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payout %d", payouts)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /payouts", idemhttp.Middleware(l, &idemhttp.Options{Logger: quiet})(payout))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	examplePost(srv.URL+"/payouts", "p-1", `{"amount":100}`)
	examplePost(srv.URL+"/payouts", "p-1", `{ "amount": 100 }`) // same request, other spacing
	examplePost(srv.URL+"/payouts", "p-1", `{"amount":200}`)    // same key, another request
	fmt.Println("payouts:", payouts)
	// Output:
	// 201 replayed="" payout 1
	// 201 replayed="true" payout 1
	// 422 replayed="" application/problem+json
	// payouts: 1
}

// A payment handler behind the transaction-bound middleware writes its row
// with the middleware's transaction: the row, the key and the response
// commit together.
func ExampleTxMiddleware() {
	l, done := exampleLedger()
	defer done()
	l.Driver().DB().Exec(`CREATE TABLE payments (k TEXT PRIMARY KEY)`)

	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := idemhttp.Tx(r.Context())
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO payments (k) VALUES ($1)`, idemhttp.Claim(r.Context()).Op.Key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // rolled back, key free
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	})
	srv := httptest.NewServer(idemhttp.TxMiddleware(l, &idemhttp.Options{Logger: quiet})(pay))
	defer srv.Close()

	examplePost(srv.URL, "order-7", `{"amount":100}`)
	examplePost(srv.URL, "order-7", `{"amount":100}`)
	var n int
	l.Driver().DB().QueryRow(`SELECT count(*) FROM payments`).Scan(&n)
	fmt.Println("rows:", n)
	// Output:
	// 201 replayed="" paid
	// 201 replayed="true" paid
	// rows: 1
}
