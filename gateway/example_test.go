package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/gateway"
)

// A gateway in front of a payments API: a retried charge is answered from
// the ledger and charged once.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "gateway-example-")
	defer os.RemoveAll(dir)
	l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(dir, "idem.db"), &idem.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	var charges atomic.Int32 // the API charges every request it gets
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	}))
	defer api.Close()
	upstream, _ := url.Parse(api.URL)
	g, err := gateway.New(l, &gateway.Config{Upstream: upstream, Logger: quiet})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":1000}`))
		req.Header.Set("Idempotency-Key", "order-42")
		req.Header.Set("Authorization", "Bearer sk_test_1") // keys are scoped by credential
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d replayed=%q\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201 replayed=""
	// 201 replayed="true"
	// 201 replayed="true"
	// charges: 1
}
