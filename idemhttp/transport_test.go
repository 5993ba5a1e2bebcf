package idemhttp_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// dropProxy is a TCP proxy that, for the connections drop selects (by
// their number, from 0), forwards the request and then closes the
// connection as soon as the upstream starts answering, without passing the
// answer on: the effect happened, the client saw a broken connection.
type dropProxy struct {
	ln    net.Listener
	conns atomic.Int64
	drop  func(n int64) bool
}

func newDropProxy(t *testing.T, upstream string, drop func(n int64) bool) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, drop: drop}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c, upstream, p.drop(p.conns.Add(1)-1))
		}
	}()
	return p
}

func (p *dropProxy) pipe(c net.Conn, upstream string, drop bool) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	go io.Copy(u, c)
	buf := make([]byte, 32<<10)
	n, err := u.Read(buf) // blocks until the upstream answers
	if err != nil || drop {
		return
	}
	if _, err := c.Write(buf[:n]); err != nil {
		return
	}
	io.Copy(c, u)
}

func (p *dropProxy) url() string { return "http://" + p.ln.Addr().String() }

// keyLog records the Idempotency-Key of every request that reaches it.
type keyLog struct {
	mu   sync.Mutex
	keys []string
	next http.Handler
}

func (k *keyLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.keys = append(k.keys, r.Header.Get("Idempotency-Key"))
	k.mu.Unlock()
	k.next.ServeHTTP(w, r)
}

func (k *keyLog) seen() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys)
}

// fast retries quickly, for tests; base sends each attempt on a new
// connection, so the proxy can drop attempts one by one. Thirty attempts:
// a proxy dropping every other connection of 8 goroutines drops all ten
// attempts of one of 32 requests about once in 30 runs (CI saw it), all
// thirty about once in 30 million.
func fast(base http.RoundTripper) *idemhttp.Transport {
	return &idemhttp.Transport{Base: base, MaxAttempts: 30, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
}

func newConnEach() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return tr
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (reply, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer client-1") // the scope: keys are per caller
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// Through a proxy that loses the response of every other connection after
// the middleware's handler ran, 32 logical requests from 8 goroutines each
// run exactly once, and each client gets the first run's response.
func TestTransportThroughDroppedResponses(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		log := &keyLog{next: idemhttp.Middleware(l, &idemhttp.Options{Logger: quiet})(h)}
		srv := serve(t, log)
		proxy := newDropProxy(t, srv.Listener.Addr().String(), func(n int64) bool { return n%2 == 0 })
		client := &http.Client{Transport: fast(newConnEach())}

		const workers, each = 8, 4
		var wg sync.WaitGroup
		var replayed atomic.Int64
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					body := fmt.Sprintf(`{"amount":%d}`, w*each+i)
					r, err := post(t, client, proxy.url()+"/charges", body)
					if r.header.Get("Idempotent-Replayed") == "true" {
						replayed.Add(1)
					}
					switch {
					case err != nil:
						errs <- err
					case r.status != http.StatusCreated || !strings.Contains(r.body, `"run":1`) || !strings.Contains(r.body, strconv.Quote(body)):
						errs <- fmt.Errorf("%s: got %d %s", body, r.status, r.body)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n, r := proxy.conns.Load(), replayed.Load(); n <= workers*each || r == 0 {
			t.Fatalf("%d connections, %d replays: no response was lost", n, r)
		}
		if got := h.total(); got != workers*each {
			t.Fatalf("%d executions for %d requests", got, workers*each)
		}
		keys := map[string]int{}
		for _, k := range log.seen() {
			if u, err := uuid.Parse(k); err != nil || u.Version() != 4 {
				t.Fatalf("key %q is not a UUIDv4", k)
			}
			keys[k]++
		}
		if len(keys) != workers*each {
			t.Fatalf("%d distinct keys for %d logical requests", len(keys), workers*each)
		}
	})
}

// One request whose first three answers are lost: four attempts, one key,
// one execution; the last attempt gets the replay.
func TestTransportOneKeyAcrossAttempts(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	log := &keyLog{next: idemhttp.Middleware(l, &idemhttp.Options{Logger: quiet})(h)}
	srv := serve(t, log)
	proxy := newDropProxy(t, srv.Listener.Addr().String(), func(n int64) bool { return n < 3 })
	client := &http.Client{Transport: fast(newConnEach())}

	r, err := post(t, client, proxy.url()+"/charges", `{"amount":1}`, "Idempotency-Key: mine")
	if err != nil || r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("got %+v, %v", r, err)
	}
	if keys := log.seen(); len(keys) != 4 || strings.Count(strings.Join(keys, ","), "mine") != 4 {
		t.Fatalf("keys %q: want the caller's key on 4 attempts", keys)
	}
	if h.total() != 1 {
		t.Fatalf("%d executions, want 1", h.total())
	}
}

// A retry that meets the first attempt still running gets 409 with
// Retry-After, waits, and then gets the first attempt's response.
func TestTransportWaitsOutInFlight(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	started, release := make(chan struct{}), make(chan struct{})
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool { close(started); <-release; return false }
	var seen atomic.Int64
	mw := idemhttp.Middleware(l, &idemhttp.Options{Logger: quiet})(h)
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw.ServeHTTP(w, r)
		if seen.Add(1) == 1 { // the duplicate's first attempt got its 409
			close(release)
		}
	}))
	first := make(chan error, 1)
	go func() {
		_, err := post(t, http.DefaultClient, srv.URL+"/charges", `{"amount":1}`, "Idempotency-Key: k")
		first <- err
	}()
	// The duplicate, through the Transport, once the first holds the key.
	<-started
	client := &http.Client{Transport: &idemhttp.Transport{BaseDelay: time.Millisecond}}
	r, err := post(t, client, srv.URL+"/charges", `{"amount":1}`, "Idempotency-Key: k")
	if err != nil || r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("duplicate got %+v, %v", r, err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if h.total() != 1 {
		t.Fatalf("%d executions, want 1", h.total())
	}
}

// statusScript answers attempt n with codes[n-1] (201 once they run out),
// counting attempts and their keys.
type statusScript struct {
	codes []int
	hdr   http.Header
	log   keyLog
}

func newScript(codes ...int) *statusScript {
	s := &statusScript{codes: codes, hdr: http.Header{}}
	s.log.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		n := len(s.log.seen())
		code := http.StatusCreated
		if n <= len(s.codes) {
			code = s.codes[n-1]
			for k, v := range s.hdr {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "attempt %d", n)
	})
	return s
}

// 429 and 5xx are retried with the same key; 4xx (and a 409 without
// Retry-After) are final.
func TestTransportRetriesOnlyRetryableStatuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		codes    []int
		retryHdr string
		attempts int
		final    int
	}{
		{[]int{503, 500, 502}, "", 4, 201},
		{[]int{429}, "0", 2, 201},
		{[]int{409}, "0", 2, 201},
		{[]int{409}, "", 1, 409},
		{[]int{400}, "", 1, 400},
		{[]int{422}, "", 1, 422},
		{[]int{404}, "", 1, 404},
		{[]int{410}, "", 1, 410},
	} {
		s := newScript(c.codes...)
		if c.retryHdr != "" {
			s.hdr.Set("Retry-After", c.retryHdr)
		}
		srv := serve(t, &s.log)
		r, err := post(t, &http.Client{Transport: fast(nil)}, srv.URL, "{}")
		keys := s.log.seen()
		if err != nil || r.status != c.final || len(keys) != c.attempts {
			t.Errorf("%v: got %d after %d attempts (%v), want %d after %d", c.codes, r.status, len(keys), err, c.final, c.attempts)
			continue
		}
		for _, k := range keys {
			if k == "" || k != keys[0] {
				t.Errorf("%v: keys %q, want one", c.codes, keys)
			}
		}
	}
}

// When attempts run out, or the next wait (here a Retry-After) would pass
// MaxElapsed, the last response is returned, readable.
func TestTransportReturnsLastAnswer(t *testing.T) {
	t.Parallel()
	s := newScript(503, 503, 503, 503)
	srv := serve(t, &s.log)
	tr := fast(nil)
	tr.MaxAttempts = 3
	r, err := post(t, &http.Client{Transport: tr}, srv.URL, "{}")
	if err != nil || r.status != 503 || r.body != "attempt 3" {
		t.Fatalf("got %+v, %v", r, err)
	}

	s = newScript(503)
	s.hdr.Set("Retry-After", "3600")
	srv = serve(t, &s.log)
	r, err = post(t, &http.Client{Transport: &idemhttp.Transport{MaxElapsed: time.Minute}}, srv.URL, "{}")
	if err != nil || r.status != 503 || len(s.log.seen()) != 1 {
		t.Fatalf("got %+v, %v after %d attempts", r, err, len(s.log.seen()))
	}
}

// A body that cannot be replayed is sent once; a needed retry is refused
// with ErrBodyNotReplayable.
func TestTransportBodyNotReplayable(t *testing.T) {
	t.Parallel()
	s := newScript(503)
	srv := serve(t, &s.log)
	req, err := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(bytes.NewReader([]byte("{}"))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: fast(nil)}).Do(req)
	if !errors.Is(err, idemhttp.ErrBodyNotReplayable) || len(s.log.seen()) != 1 {
		t.Fatalf("got %v after %d attempts", err, len(s.log.seen()))
	}
}

// Methods that are not guarded get no key and one attempt.
func TestTransportUnguardedMethods(t *testing.T) {
	t.Parallel()
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		s := newScript(503)
		srv := serve(t, &s.log)
		req, _ := http.NewRequest(m, srv.URL, nil)
		resp, err := (&http.Client{Transport: fast(nil)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if keys := s.log.seen(); resp.StatusCode != 503 || len(keys) != 1 || keys[0] != "" {
			t.Errorf("%s: %d with keys %q", m, resp.StatusCode, keys)
		}
	}
}
