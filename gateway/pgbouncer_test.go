package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// Two gateways (two hosts) on one PostgreSQL through PgBouncer, in session
// and in transaction pooling mode: the same key sent to both at once
// reaches the upstream once, and every retry replays the stored answer
// byte for byte.
func TestPgBouncerGateway(t *testing.T) {
	for _, mode := range []pgtest.PoolMode{pgtest.SessionPooling, pgtest.TransactionPooling} {
		t.Run(string(mode), func(t *testing.T) {
			_, url := pgtest.NewPgBouncer(t, mode)
			if mode == pgtest.TransactionPooling {
				url += "&pooler=transaction"
			}
			up := newUpstream()
			upURL := serveQuiet(t, up).URL
			var gws []string
			for range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				l, err := dburl.Open(ctx, url, &idem.Options{Logger: quiet})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				gws = append(gws, newGateway(t, l, upURL, nil))
			}
			const keys, senders = 6, 4
			var mu sync.Mutex
			first := map[string]string{} // key -> the 201 body seen first
			var wg sync.WaitGroup
			for k := range keys {
				for s := range senders {
					wg.Go(func() {
						key := fmt.Sprintf("key-%d", k)
						r := post(t, gws[s%2]+"/charges", `{"amount":1}`, "Idempotency-Key: "+key)
						switch r.status {
						case http.StatusCreated:
							mu.Lock()
							if b, ok := first[key]; ok && b != r.body {
								t.Errorf("%s: two different answers %q and %q", key, b, r.body)
							}
							first[key] = r.body
							mu.Unlock()
						case http.StatusConflict: // in flight on the other gateway
						case http.StatusServiceUnavailable:
							// The ledger did not answer within the
							// middleware's bound (a loaded machine):
							// nothing ran, the retries below settle it.
						default:
							t.Errorf("%s: %d %q", key, r.status, r.body)
						}
					})
				}
			}
			wg.Wait()
			for k := range keys {
				key := fmt.Sprintf("key-%d", k)
				for _, gw := range gws {
					r := retry(t, gw+"/charges", `{"amount":1}`, "Idempotency-Key: "+key)
					b, ok := first[key]
					if !ok && r.status == http.StatusCreated { // every first send got a 503
						first[key] = r.body
						continue
					}
					if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || b != r.body {
						t.Fatalf("%s retry: %d %v %q; first answer %q", key, r.status, r.header, r.body, b)
					}
				}
				if n := up.count(key); n != 1 {
					t.Fatalf("%s reached the upstream %d times", key, n)
				}
			}
		})
	}
}
