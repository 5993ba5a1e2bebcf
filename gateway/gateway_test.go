package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/demo"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) {
	http.DefaultClient.Transport = ledgertest.Authenticated(http.DefaultTransport)
	pgtest.Main(m)
}

var quiet = slog.New(slog.DiscardHandler)

// eachDriver runs fn against a fresh ledger on SQLite and on PostgreSQL.
func eachDriver(t *testing.T, fn func(t *testing.T, l *idem.Ledger)) { ledgertest.EachDriver(t, fn) }

func openLedger(t testing.TB, driver string) *idem.Ledger { return ledgertest.Open(t, driver) }

// upstream is a test API that counts what reaches it per key.
type upstream struct {
	mu   sync.Mutex
	seen map[string]int // requests per raw Idempotency-Key value
	// handle, when set, answers instead of the default 201.
	handle func(w http.ResponseWriter, r *http.Request)
}

func newUpstream() *upstream { return &upstream{seen: map[string]int{}} }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen[r.Header.Get("Idempotency-Key")]++
	n := u.seen[r.Header.Get("Idempotency-Key")]
	u.mu.Unlock()
	if u.handle != nil {
		u.handle(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"n":`+string(rune('0'+n))+`,"body":`+strings.TrimSpace(string(b))+`}`)
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[key]
}

// record reads the record of key, whatever its scope.
func record(t *testing.T, l *idem.Ledger, key string) (idemtype.Record, error) {
	t.Helper()
	recs, err := l.List(context.Background(), idemtype.ListFilter{})
	for _, r := range recs {
		if r.Key == key {
			return r, nil
		}
	}
	return idemtype.Record{}, fmt.Errorf("no record of %q (%v)", key, err)
}

func serveQuiet(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func newGateway(t *testing.T, l *idem.Ledger, upstreamURL string, cfg *gateway.Config) string {
	t.Helper()
	if cfg == nil {
		cfg = &gateway.Config{}
	}
	u, err := url.Parse(upstreamURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream, cfg.Logger = u, quiet
	g, err := gateway.New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveQuiet(t, g).URL
}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t testing.TB, url, body string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(k, strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func wantProblem(t *testing.T, r reply, status int, typ string) {
	t.Helper()
	if r.status != status || !strings.Contains(r.body, `"type":"`+typ+`"`) || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %q, want %d %s", r.status, r.body, status, typ)
	}
}

// retry posts until the answer is not a 409, for at most 10 s.
func retry(t *testing.T, url, body string, hdr ...string) reply {
	t.Helper()
	var r reply
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r = post(t, url, body, hdr...); r.status != http.StatusConflict {
			return r
		}
	}
	t.Fatalf("still 409 after 10s: %q", r.body)
	return r
}

// The table's main rows through the proxy: once, replay, 422, 409; the
// key reaches the upstream unchanged.
func TestGatewaySemantics(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		release := make(chan struct{})
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
			w.Header().Set("Set-Cookie", "s=1")
			w.WriteHeader(201)
			io.WriteString(w, `{"charged":true}`)
		}
		gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
		first := post(t, gw+"/charges", `{"amount":1}`, `Idempotency-Key: "order-1"`)
		again := post(t, gw+"/charges", ` { "amount" : 1 } `, `Idempotency-Key: order-1`)
		if first.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Set-Cookie") != "" {
			t.Fatalf("first %d %q, again %d %q %v", first.status, first.body, again.status, again.body, again.header)
		}
		if up.count(`"order-1"`) != 1 {
			t.Fatalf("upstream saw %v, want the quoted key once", up.seen)
		}
		wantProblem(t, post(t, gw+"/charges", `{"amount":2}`, "Idempotency-Key: order-1"), 422, idemhttp.ProblemKeyMismatch)

		done := make(chan reply)
		go func() { done <- post(t, gw+"/slow", `{}`, "Idempotency-Key: slow") }()
		for up.count("slow") == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		r := post(t, gw+"/slow", `{}`, "Idempotency-Key: slow")
		wantProblem(t, r, 409, idemhttp.ProblemInFlight)
		if r.header.Get("Retry-After") == "" {
			t.Error("409 without Retry-After")
		}
		close(release)
		<-done
		if up.count("slow") != 1 {
			t.Fatal("the 409 reached the upstream")
		}
	})
}

// Nothing sent (connection refused): 502, key released, the retry starts
// clean once the upstream is back.
func TestUpstreamRefused(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		gw := newGateway(t, l, "http://"+addr, nil)
		wantProblem(t, post(t, gw, `{}`, "Idempotency-Key: k"), 502, idemhttp.ProblemUpstreamDown)
		rec, err := record(t, l, "k")
		if err != nil || rec.State != idemtype.StateReleased {
			t.Fatalf("record after 502: %v %v, want released", rec.State, err)
		}
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s again: %v", addr, err)
		}
		up := newUpstream()
		srv := &http.Server{Handler: up}
		go srv.Serve(ln)
		defer srv.Close()
		if r := post(t, gw, `{}`, "Idempotency-Key: k"); r.status != 201 || up.count("k") != 1 {
			t.Fatalf("retry: %d, upstream saw %d", r.status, up.count("k"))
		}
	})
}

// Sent, no answer in time: 504, claim kept until its lease ends; then the
// retry is forwarded again with the same key.
func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		late := make(chan struct{}) // the first call answers only after the gateway gave up
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			if up.count("k") == 1 {
				<-late
			}
			w.WriteHeader(201)
			io.WriteString(w, "done")
		}
		// The lease outlasts the timeout by far, so that the second request
		// meets it even on a loaded machine.
		gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{
			Timeout: 100 * time.Millisecond, Options: &idemhttp.Options{Lease: 2 * time.Second}})
		answer := sync.OnceFunc(func() { close(late) })
		t.Cleanup(answer) // before the upstream's server closes, on failure too
		r := post(t, gw, `{}`, "Idempotency-Key: k")
		wantProblem(t, r, 504, idemhttp.ProblemUpstreamUnknown)
		wantProblem(t, post(t, gw, `{}`, "Idempotency-Key: k"), 409, idemhttp.ProblemInFlight)
		answer()
		if r := retry(t, gw, `{}`, "Idempotency-Key: k"); r.status != 201 || up.count("k") != 2 {
			t.Fatalf("after the lease: %d, upstream saw the key %d times, want 2", r.status, up.count("k"))
		}
	})
}

// The upstream reads the request and drops the connection: outcome unknown.
func TestUpstreamDrops(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}
		gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Options: &idemhttp.Options{Lease: time.Minute}})
		wantProblem(t, post(t, gw, `{}`, "Idempotency-Key: k"), 504, idemhttp.ProblemUpstreamUnknown)
		rec, _ := record(t, l, "k")
		if rec.State != idemtype.StateInProgress {
			t.Fatalf("record is %s, want in_progress until its lease ends", rec.State)
		}
	})
}

func TestUpstream5xx(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			if up.count(r.Header.Get("Idempotency-Key")) == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(201)
		}
		gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
		if r := post(t, gw, `{}`, "Idempotency-Key: k"); r.status != 503 || r.body != "busy\n" {
			t.Fatalf("5xx not passed through: %d %q", r.status, r.body)
		}
		if r := post(t, gw, `{}`, "Idempotency-Key: k"); r.status != 201 || up.count("k") != 2 {
			t.Fatalf("default policy releases: got %d after %d calls", r.status, up.count("k"))
		}
		stored := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Options: &idemhttp.Options{ServerErrors: idemhttp.Store5xx}})
		post(t, stored, `{}`, "Idempotency-Key: s")
		if r := post(t, stored, `{}`, "Idempotency-Key: s"); r.status != 503 || r.header.Get("Idempotent-Replayed") != "true" || up.count("s") != 1 {
			t.Fatalf("Store5xx: %d %v after %d calls", r.status, r.header, up.count("s"))
		}
	})
}

// A response over --max-response reaches the client whole; a retry gets a
// clear 410 and never a second execution. A chunked response under the
// limit is stored although the proxy flushes it.
func TestResponseSizes(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		big := strings.Repeat("x", 300_000)
		up := newUpstream()
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			n := 300_000
			if r.URL.Path == "/small" {
				n = 20_000
			}
			for i := 0; i < n; i += 10_000 {
				io.WriteString(w, big[:10_000])
				w.(http.Flusher).Flush()
			}
		}
		gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Options: &idemhttp.Options{MaxResponse: 100_000}})
		if r := post(t, gw+"/big", `{}`, "Idempotency-Key: big"); r.status != 200 || r.body != big {
			t.Fatalf("large response: %d, %d bytes", r.status, len(r.body))
		}
		wantProblem(t, post(t, gw+"/big", `{}`, "Idempotency-Key: big"), 410, idemhttp.ProblemResponseNotStored)
		small := post(t, gw+"/small", `{}`, "Idempotency-Key: small")
		if r := post(t, gw+"/small", `{}`, "Idempotency-Key: small"); r.body != small.body || len(r.body) != 20_000 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("chunked small response not replayed: %d %v", len(r.body), r.header)
		}
		if up.count("big") != 1 || up.count("small") != 1 {
			t.Fatalf("upstream calls: %v", up.seen)
		}
	})
}

func TestEventStreamPassesThrough(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	next := make(chan struct{})
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "data: two\n\n")
	}
	gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
	req, _ := http.NewRequest("POST", gw, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "sse")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(resp.Body).ReadString('\n'); line != "data: one\n" {
		t.Fatalf("first event not streamed: %q", line)
	}
	close(next)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wantProblem(t, retry(t, gw, `{}`, "Idempotency-Key: sse"), 410, idemhttp.ProblemResponseNotStored)
}

func TestBodyLimitsAndBadKeys(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Options: &idemhttp.Options{MaxBody: 100, RequireKey: true}})
		wantProblem(t, post(t, gw, `"`+strings.Repeat("x", 200)+`"`, "Idempotency-Key: k"), 413, idemhttp.ProblemBodyTooLarge)
		wantProblem(t, post(t, gw, `{}`), 400, idemhttp.ProblemKeyMissing)
		wantProblem(t, post(t, gw, `{}`, "Idempotency-Key: "+strings.Repeat("k", 256)), 400, idemhttp.ProblemKeyInvalid)
		wantProblem(t, post(t, gw, `{}`, "Idempotency-Key: \"ké\""), 400, idemhttp.ProblemKeyInvalid)
		wantProblem(t, post(t, gw, `{"a":`, "Idempotency-Key: k"), 400, idemhttp.ProblemBodyInvalid)
		if len(up.seen) != 0 {
			t.Fatalf("rejected requests reached the upstream: %v", up.seen)
		}
		if recs, _ := l.List(context.Background(), idemtype.ListFilter{}); len(recs) != 0 {
			t.Fatalf("rejected requests left %d records", len(recs))
		}
		// Unguarded methods go through untouched.
		resp, err := http.Get(gw + "/anything")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if up.count("") != 1 {
			t.Fatal("GET did not pass through")
		}
	})
}

func TestDemo(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	demo := demo.New()
	gw := newGateway(t, l, serveQuiet(t, demo).URL, nil)
	a := post(t, gw+"/charges", `{"amount":1000}`, "Idempotency-Key: order-42")
	b := post(t, gw+"/charges", `{"amount":1000}`, "Idempotency-Key: order-42")
	if a.status != 201 || b.body != a.body || demo.Charges("order-42") != 1 {
		t.Fatalf("demo: %d %q / %q, %d charges", a.status, a.body, b.body, demo.Charges("order-42"))
	}
	wantProblem(t, post(t, gw+"/charges", `{"amount":999}`, "Idempotency-Key: order-42"), 422, idemhttp.ProblemKeyMismatch)
	post(t, gw+"/charges", `{"amount":5}`)
	post(t, gw+"/charges", `{"amount":5}`)
	if demo.Charges("") != 2 {
		t.Fatal("requests without a key should pass through (and charge twice)")
	}
	if r := post(t, gw+"/charges", `{"amount":5}`, "Idempotency-Key: f", "Demo-Fail: 503"); r.status != 503 || demo.Charges("f") != 0 {
		t.Fatalf("Demo-Fail: %d", r.status)
	}
}

func newLoopbackListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// An upstream 429 (like 408 and 425) says nothing was done: passed
// through, not stored, key released, so the client's retry gets through.
func TestUpstream429Released(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		if up.count(r.Header.Get("Idempotency-Key")) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(201)
	}
	gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
	if r := post(t, gw, `{}`, "Idempotency-Key: k"); r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("429 not passed through: %d %v", r.status, r.header)
	}
	if r := post(t, gw, `{}`, "Idempotency-Key: k"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || up.count("k") != 2 {
		t.Fatalf("after a 429 the retry got %d %v after %d calls; want it forwarded", r.status, r.header, up.count("k"))
	}
}

// Under the park policy the 504 says what will happen: the key is parked,
// not forwarded again; and a retry after the lease is indeed parked.
func TestUpstreamTimeoutUnderPark(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		w.WriteHeader(201)
	}
	// A timeout long enough that the request is sent before it fires even
	// under -race on a loaded machine (at 50 ms CI saw a 502: nothing sent).
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{
		Timeout: 500 * time.Millisecond, Options: &idemhttp.Options{Lease: 200 * time.Millisecond, Stale: idem.StalePark}})
	r := post(t, gw, `{}`, "Idempotency-Key: k")
	wantProblem(t, r, 504, idemhttp.ProblemUpstreamUnknown)
	if strings.Contains(r.body, "forwarded again") || !strings.Contains(r.body, "parked") {
		t.Fatalf("504 under --stale park promises the wrong thing: %s", r.body)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = post(t, gw, `{}`, "Idempotency-Key: k")
		if strings.Contains(r.body, idemhttp.ProblemParked) || time.Now().After(deadline) {
			break
		}
	}
	wantProblem(t, r, 409, idemhttp.ProblemParked)
	if up.count("k") != 1 {
		t.Fatalf("upstream saw the key %d times, want 1", up.count("k"))
	}
}
