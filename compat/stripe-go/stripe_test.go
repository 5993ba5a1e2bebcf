// Package stripego drives idem's gateway with stripe-go, Stripe's own Go
// SDK, as its users' clients will: form-encoded POSTs, an Idempotency-Key
// the SDK makes up when the caller gives none, telemetry headers, and the
// SDK's own retries (on 409, on 5xx, on a dropped connection) with the
// same key. The upstream is a fake payments API that counts its effects;
// every test asserts how many happened.
//
// It is a module of its own, so that stripe-go stays out of idem's
// go.mod: cd compat/stripe-go && go test ./...
package stripego

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
	"github.com/stripe/stripe-go/v82"
)

// payments is the upstream: POST /v1/payment_intents creates one and
// counts it as an effect. fail, when above zero, makes that many
// requests fail with failStatus (503 when unset) before any effect, as a
// load balancer or rate limiter in front of it would (a plain-text body:
// stripe-go retries an answer whose body is not a Stripe error, and
// gives up on a 5xx that is one); slow delays every answer.
type payments struct {
	mu         sync.Mutex
	effects    map[string]int // Idempotency-Key the gateway forwarded -> effects
	total      atomic.Int64
	calls      atomic.Int64
	fail       atomic.Int64
	failStatus int
	slow       time.Duration
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.calls.Add(1)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
		http.NotFound(w, r)
		return
	}
	if p.fail.Add(-1) >= 0 {
		http.Error(w, "nothing done, try again", cmp.Or(p.failStatus, http.StatusServiceUnavailable))
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	time.Sleep(p.slow)
	n := p.total.Add(1)
	p.mu.Lock()
	p.effects[r.Header.Get("Idempotency-Key")]++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_%d", n))
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, `{"id":"pi_%d","object":"payment_intent","amount":%s,"currency":%q,"status":"requires_payment_method"}`,
		n, r.PostForm.Get("amount"), r.PostForm.Get("currency"))
}

// effectsOf is how many payment intents the upstream made for key.
func (p *payments) effectsOf(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effects[key]
}

// setup starts the upstream and the gateway in front of it (the defaults
// `idem serve` has: keys scoped by the Authorization header, 409 to a
// retry while the first is in flight), on a SQLite ledger.
func setup(t *testing.T, opts *idemhttp.Options) (*payments, string) {
	t.Helper()
	ctx := context.Background()
	up := &payments{effects: map[string]int{}}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	u, _ := url.Parse(upstream.URL)
	gw, err := gateway.New(l, &gateway.Config{Upstream: u, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return up, srv.URL
}

// client is stripe-go pointed at the gateway, with secret key sk and the
// SDK's retries (which sleep between attempts, as in production).
func client(gw, sk string, retries int64) *stripe.Client {
	b := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(gw),
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return stripe.NewClient(sk, stripe.WithBackends(b))
}

func create(ctx context.Context, c *stripe.Client, key string, amount int64) (*stripe.PaymentIntent, error) {
	p := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("eur")}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return c.V1PaymentIntents.Create(ctx, p)
}

// TestReplay: the second call with the same key gets the first payment
// intent, marked replayed, and the upstream made one.
func TestReplay(t *testing.T) {
	up, gw := setup(t, nil)
	c := client(gw, "sk_test_alice", 0)
	ctx := context.Background()
	a, err := create(ctx, c, "order-1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := create(ctx, c, "order-1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID || b.Amount != 1000 {
		t.Fatalf("replay: %s then %s (amount %d)", a.ID, b.ID, b.Amount)
	}
	if got := b.LastResponse.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("replay: Idempotent-Replayed %q", got)
	}
	if n := up.effectsOf("order-1"); n != 1 {
		t.Fatalf("%d payment intents for one key", n)
	}
}

// TestMismatch: the same key with another amount is refused with 422 and
// nothing is done. The answer is a problem document, not a Stripe error,
// so the SDK reports its text and retries it like any error it cannot
// read (here once); every retry is refused alike.
func TestMismatch(t *testing.T) {
	up, gw := setup(t, nil)
	c := client(gw, "sk_test_alice", 1)
	ctx := context.Background()
	if _, err := create(ctx, c, "order-2", 1000); err != nil {
		t.Fatal(err)
	}
	calls := up.calls.Load()
	_, err := create(ctx, c, "order-2", 999)
	if err == nil || !strings.Contains(err.Error(), `"status":422`) || !strings.Contains(err.Error(), "key-mismatch") {
		t.Fatalf("reuse with another amount: %v", err)
	}
	if up.calls.Load() != calls || up.total.Load() != 1 {
		t.Fatalf("a mismatched reuse reached the upstream: %d calls, %d effects", up.calls.Load()-calls, up.total.Load())
	}
}

// TestTenants: two secret keys sending the same Idempotency-Key are two
// callers; each gets its own payment intent, never the other's.
func TestTenants(t *testing.T) {
	up, gw := setup(t, nil)
	ctx := context.Background()
	a, err := create(ctx, client(gw, "sk_test_alice", 0), "shared-key", 1000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := create(ctx, client(gw, "sk_test_bob", 0), "shared-key", 2000)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || b.Amount != 2000 || up.effectsOf("shared-key") != 2 {
		t.Fatalf("two tenants, one key: %s (%d) and %s (%d), %d effects", a.ID, a.Amount, b.ID, b.Amount, up.effectsOf("shared-key"))
	}
}

// TestSDKRetriesAfterNothingDone: an upstream 503 or 429 says nothing
// was done, so the gateway releases the key instead of storing the
// answer; the SDK's retry, with the same key, is forwarded and makes the
// one payment intent.
func TestSDKRetriesAfterNothingDone(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			up, gw := setup(t, nil)
			up.failStatus = status
			up.fail.Store(1)
			c := client(gw, "sk_test_alice", 2)
			pi, err := create(context.Background(), c, "order-3", 1000)
			if err != nil {
				t.Fatal(err)
			}
			if up.calls.Load() != 2 || up.effectsOf("order-3") != 1 || pi.LastResponse.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("after a %d: %d calls, %d effects, replayed %q", status, up.calls.Load(), up.effectsOf("order-3"),
					pi.LastResponse.Header.Get("Idempotent-Replayed"))
			}
		})
	}
}

// TestConcurrentSameKey: eight goroutines create with one key while the
// upstream takes its time. The gateway answers all but one 409 (in
// flight); the SDK retries those with the same key until the first is
// stored, and every caller ends with the same payment intent.
func TestConcurrentSameKey(t *testing.T) {
	up, gw := setup(t, nil)
	up.slow = 300 * time.Millisecond
	createConcurrently(t, client(gw, "sk_test_alice", 8), "order-4")
	if n := up.effectsOf("order-4"); n != 1 {
		t.Fatalf("%d payment intents for one key from %d concurrent callers", n, concurrentCallers)
	}
}

// concurrentCallers is how many goroutines createConcurrently runs.
const concurrentCallers = 8

// createConcurrently creates a payment intent with key from
// concurrentCallers goroutines at once, and fails t unless every one of
// them got the same one.
func createConcurrently(t *testing.T, c *stripe.Client, key string) {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, concurrentCallers)
	errs := make([]error, concurrentCallers)
	var wg sync.WaitGroup
	for i := range concurrentCallers {
		wg.Go(func() {
			pi, err := create(ctx, c, key, 1000)
			if err == nil {
				ids[i] = pi.ID
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range concurrentCallers {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("caller %d: %s, %v (caller 0: %s)", i, ids[i], errs[i], ids[0])
		}
	}
}

// TestGeneratedKeys: given no key, stripe-go makes one up for each call
// (and keeps it for that call's retries), so two calls are two payment
// intents, each retry-safe.
func TestGeneratedKeys(t *testing.T) {
	up, gw := setup(t, &idemhttp.Options{RequireKey: true})
	c := client(gw, "sk_test_alice", 2)
	up.fail.Store(1)
	ctx := context.Background()
	for range 2 {
		if _, err := create(ctx, c, "", 1000); err != nil {
			t.Fatal(err)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.total.Load() != 2 || len(up.effects) != 2 {
		t.Fatalf("two calls without a key: %d effects under %d keys", up.total.Load(), len(up.effects))
	}
	for k, n := range up.effects {
		if k == "" || n != 1 {
			t.Fatalf("key %q: %d effects", k, n)
		}
	}
}

// TestConcurrentSameKeyWait: with the gateway told to wait (idem serve
// --on-conflict wait), the concurrent callers are held until the first
// answer is stored and get it replayed: no 409, so the SDK makes one
// attempt each, even with its retries off.
func TestConcurrentSameKeyWait(t *testing.T) {
	up, gw := setup(t, &idemhttp.Options{OnConflict: idemhttp.Wait})
	up.slow = 300 * time.Millisecond
	createConcurrently(t, client(gw, "sk_test_alice", 0), "order-5")
	if n, calls := up.effectsOf("order-5"), up.calls.Load(); n != 1 || calls != 1 {
		t.Fatalf("%d payment intents and %d upstream calls for one key from %d concurrent callers", n, calls, concurrentCallers)
	}
}
