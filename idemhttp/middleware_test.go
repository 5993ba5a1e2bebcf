package idemhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

func guarded(t *testing.T, l *idem.Ledger, opts *idemhttp.Options, h http.Handler) string {
	t.Helper()
	if opts == nil {
		opts = &idemhttp.Options{}
	}
	opts.Logger = quiet
	mw, err := idemhttp.New(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, mw(h)).URL
}

func TestFirstThenReplay(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, nil, h)

		first := do(t, "POST", url+"/charges", `{"amount":1000}`, "Idempotency-Key: k1")
		if first.status != 201 || first.header.Get("Set-Cookie") == "" || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %d %v %q", first.status, first.header, first.body)
		}
		for range 3 {
			again := do(t, "POST", url+"/charges", `{"amount":1000}`, "Idempotency-Key: k1")
			if again.status != 201 || again.body != first.body {
				t.Fatalf("replay: %d %q, want 201 %q", again.status, again.body, first.body)
			}
			h := again.header
			if h.Get("Idempotent-Replayed") != "true" || h.Get("Cache-Control") != "no-store" {
				t.Errorf("replay headers: %v", h)
			}
			if h.Get("Location") != "/charges/ch_1" || h.Get("Content-Type") != "application/json" {
				t.Errorf("allowed headers not replayed: %v", h)
			}
			if h.Get("Set-Cookie") != "" || h.Get("X-Private") != "" {
				t.Errorf("replay carries headers it must not: %v", h)
			}
		}
		if n := h.count("k1"); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

// The key is accepted bare and as an sf-string, and both are one key.
func TestKeySpellings(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		var mu sync.Mutex
		var seen []string
		url := guarded(t, l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Header.Get("Idempotency-Key"))
			mu.Unlock()
			w.WriteHeader(201)
		}))
		a := do(t, "POST", url, `{}`, `Idempotency-Key: "abc"`)
		b := do(t, "POST", url, `{}`, `Idempotency-Key: abc`)
		if a.status != 201 || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("quoted then bare: %d, %d %v", a.status, b.status, b.header)
		}
		if len(seen) != 1 || seen[0] != `"abc"` {
			t.Fatalf("handler saw %q, want the key forwarded unchanged once", seen)
		}
	})
}

func TestInFlightGets409(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		started, release := make(chan struct{}), make(chan struct{})
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			close(started)
			<-release
			return false
		}
		url := guarded(t, l, nil, h)
		done := make(chan reply)
		go func() { done <- do(t, "POST", url, `{"a":1}`, "Idempotency-Key: k") }()
		<-started
		r := do(t, "POST", url, `{"a":1}`, "Idempotency-Key: k")
		wantProblem(t, r, 409, idemhttp.ProblemInFlight)
		if r.header.Get("Retry-After") == "" {
			t.Error("409 without Retry-After")
		}
		close(release)
		first := <-done
		if again := do(t, "POST", url, `{"a":1}`, "Idempotency-Key: k"); again.body != first.body {
			t.Fatalf("after: %q, want %q", again.body, first.body)
		}
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

func TestWaitForTheFirst(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		started := make(chan struct{})
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			close(started)
			time.Sleep(200 * time.Millisecond)
			return false
		}
		url := guarded(t, l, &idemhttp.Options{OnConflict: idemhttp.Wait, WaitTimeout: 10 * time.Second}, h)
		done := make(chan reply)
		go func() { done <- do(t, "POST", url, `{"a":1}`, "Idempotency-Key: k") }()
		<-started
		second := do(t, "POST", url, `{"a":1}`, "Idempotency-Key: k")
		first := <-done
		if second.status != 201 || second.body != first.body || second.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("waiter got %d %q, want the first's %q replayed", second.status, second.body, first.body)
		}
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	started, release := make(chan struct{}), make(chan struct{})
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		close(started)
		<-release
		return false
	}
	url := guarded(t, l, &idemhttp.Options{OnConflict: idemhttp.Wait, WaitTimeout: 100 * time.Millisecond}, h)
	done := make(chan reply)
	go func() { done <- do(t, "POST", url, `{}`, "Idempotency-Key: k") }()
	<-started
	wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: k"), 409, idemhttp.ProblemInFlight)
	close(release)
	<-done
}

// Same key, different method, path, query or body: 422, nothing runs.
// JSON that differs only in white space, key order or number spelling is
// the same request.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{Methods: []string{"POST", "PATCH"}}, h)
		first := do(t, "POST", url+"/charges?x=1", `{"amount":1000,"currency":"eur"}`, "Idempotency-Key: k")
		same := []string{
			`{"currency":"eur","amount":1000}`,
			"{\n  \"amount\": 1000,\n  \"currency\": \"eur\"\n}",
			`{"amount":1e3,"currency":"\u0065ur"}`,
		}
		for _, b := range same {
			if r := do(t, "POST", url+"/charges?x=1", b, "Idempotency-Key: k"); r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("body %q: got %d %q, want a replay", b, r.status, r.body)
			}
		}
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/charges?x=1", `{"amount":999,"currency":"eur"}`},
			{"POST", "/charges?x=2", `{"amount":1000,"currency":"eur"}`},
			{"POST", "/refunds?x=1", `{"amount":1000,"currency":"eur"}`},
			{"PATCH", "/charges?x=1", `{"amount":1000,"currency":"eur"}`},
			{"POST", "/charges?x=1", ``},
		} {
			wantProblem(t, do(t, c.method, url+c.path, c.body, "Idempotency-Key: k"), 422, idemhttp.ProblemKeyMismatch)
		}
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

func TestExcludedFields(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	url := guarded(t, l, &idemhttp.Options{Exclude: []string{"/sent_at"}}, h)
	first := do(t, "POST", url, `{"amount":1,"sent_at":"10:00"}`, "Idempotency-Key: k")
	if r := do(t, "POST", url, `{"amount":1,"sent_at":"10:01"}`, "Idempotency-Key: k"); r.body != first.body {
		t.Fatalf("excluded field changed the fingerprint: %d %q", r.status, r.body)
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		open := guarded(t, l, nil, h)
		do(t, "POST", open, `{}`)
		do(t, "POST", open, `{}`)
		if n := h.count(""); n != 2 {
			t.Fatalf("without a key and not required: ran %d times, want 2 (passed through)", n)
		}
		strict := guarded(t, l, &idemhttp.Options{RequireKey: true}, h)
		r := do(t, "POST", strict, `{}`)
		wantProblem(t, r, 400, idemhttp.ProblemKeyMissing)
		if !strings.Contains(r.header.Get("Link"), idemhttp.DefaultDocsURL) || !strings.Contains(r.body, idemhttp.DefaultDocsURL) {
			t.Errorf("400 does not link the docs: %v %s", r.header, r.body)
		}
		if n := h.count(""); n != 2 || len(records(t, l)) != 0 {
			t.Fatalf("missing key reached the handler or the ledger")
		}
	})
}

func TestBadKeysNeverReachTheLedger(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, nil, h)
		for _, k := range []string{`""`, strings.Repeat("k", 256), `"abc`, `"a";p=1`, "a b", "é"} {
			wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: "+k), 400, idemhttp.ProblemKeyInvalid)
		}
		wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: a", "Idempotency-Key: b"), 400, idemhttp.ProblemKeyInvalid)
		if h.total() != 0 || len(records(t, l)) != 0 {
			t.Fatalf("a bad key reached the handler (%d) or the ledger (%d records)", h.total(), len(records(t, l)))
		}
	})
}

// countingBody counts what is read from it: 10 MiB of 'x' on demand.
type countingBody struct{ read, size int64 }

func (b *countingBody) Read(p []byte) (int, error) {
	if b.read >= b.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), b.size-b.read)
	for i := range n {
		p[i] = 'x'
	}
	b.read += n
	return int(n), nil
}
func (b *countingBody) Close() error { return nil }

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		mw := idemhttp.Middleware(l, &idemhttp.Options{MaxBody: 1000, Logger: quiet})(h)
		// Declared length: refused without reading.
		r := do(t, "POST", serve(t, mw).URL, `"`+strings.Repeat("x", 999)+`"`, "Idempotency-Key: k")
		wantProblem(t, r, 413, idemhttp.ProblemBodyTooLarge)
		// Unknown length: at most limit+1 bytes read.
		body := &countingBody{size: 10 << 20}
		req := httptest.NewRequest("POST", "/", nil)
		req.Body, req.ContentLength = body, -1
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != 413 || body.read > 1001 {
			t.Fatalf("got %d after reading %d bytes, want 413 after at most 1001", rec.Code, body.read)
		}
		if h.total() != 0 || len(records(t, l)) != 0 {
			t.Fatal("a too-large body was claimed or handled")
		}
		if r := do(t, "POST", serve(t, mw).URL, `"`+strings.Repeat("x", 998)+`"`, "Idempotency-Key: k"); r.status != 201 {
			t.Fatalf("a body of exactly the limit: %d", r.status)
		}
	})
}

func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		big := strings.Repeat("0123456789", 10_000) // 100 kB
		h := newCounter()
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "text/plain")
			for i := 0; i < len(big); i += 1000 {
				io.WriteString(w, big[i:i+1000])
			}
			return true
		}
		url := guarded(t, l, &idemhttp.Options{MaxResponse: 10_000}, h)
		first := do(t, "POST", url, `{}`, "Idempotency-Key: k")
		if first.status != 200 || first.body != big {
			t.Fatalf("the client did not get the whole large response: %d, %d bytes", first.status, len(first.body))
		}
		r := do(t, "POST", url, `{}`, "Idempotency-Key: k")
		wantProblem(t, r, 410, idemhttp.ProblemResponseNotStored)
		if !strings.Contains(r.body, `"first_status":200`) {
			t.Errorf("problem does not name the first status: %s", r.body)
		}
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// A text/event-stream response goes through as it is written (Flush
// works through the middleware) and is not stored.
func TestStreamPassesThrough(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		next := make(chan struct{})
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush: %v", err)
			}
			<-next
			io.WriteString(w, "data: two\n\n")
			return true
		}
		url := guarded(t, l, nil, h)
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: one\n" {
			t.Fatalf("first event before the handler finished: %q, %v", line, err)
		}
		close(next)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var r reply
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if r = do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 409 {
				break
			}
		}
		wantProblem(t, r, 410, idemhttp.ProblemResponseNotStored)
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// A handler flushing a response without Content-Length streams it.
func TestFlushWithoutLengthStreams(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		return true
	}
	url := guarded(t, l, nil, h)
	if r := do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.body != "part" {
		t.Fatalf("got %q", r.body)
	}
	wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: k"), 410, idemhttp.ProblemResponseNotStored)
}

func TestServerErrorPolicies(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		failing := func() *counter {
			h := newCounter()
			h.before = func(w http.ResponseWriter, r *http.Request) bool {
				http.Error(w, "upstream broke", http.StatusServiceUnavailable)
				return true
			}
			return h
		}
		t.Run("release (default)", func(t *testing.T) {
			h := failing()
			url := guarded(t, l, nil, h)
			for range 2 {
				if r := do(t, "POST", url, `{}`, "Idempotency-Key: release"); r.status != 503 || r.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("got %d %v", r.status, r.header)
				}
			}
			if n := h.count("release"); n != 2 {
				t.Fatalf("ran %d times, want 2 (released after each 5xx)", n)
			}
		})
		t.Run("store", func(t *testing.T) {
			h := failing()
			url := guarded(t, l, &idemhttp.Options{ServerErrors: idemhttp.Store5xx}, h)
			first := do(t, "POST", url, `{}`, "Idempotency-Key: store")
			r := do(t, "POST", url, `{}`, "Idempotency-Key: store")
			if r.status != 503 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" || h.count("store") != 1 {
				t.Fatalf("got %d %q %v after %d runs, want the 503 replayed", r.status, r.body, r.header, h.count("store"))
			}
		})
		t.Run("hold", func(t *testing.T) {
			h := failing()
			url := guarded(t, l, &idemhttp.Options{ServerErrors: idemhttp.Hold5xx, Lease: 300 * time.Millisecond}, h)
			do(t, "POST", url, `{}`, "Idempotency-Key: hold")
			wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: hold"), 409, idemhttp.ProblemInFlight)
			time.Sleep(400 * time.Millisecond)
			if r := do(t, "POST", url, `{}`, "Idempotency-Key: hold"); r.status != 503 || h.count("hold") != 2 {
				t.Fatalf("after the lease: %d, %d runs; want the key handled again", r.status, h.count("hold"))
			}
		})
	})
}

func TestOtherMethodsPassThrough(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, nil, h)
		for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
			do(t, m, url, "", "Idempotency-Key: k")
			do(t, m, url, "", "Idempotency-Key: k")
		}
		if n := h.count("k"); n != 10 || len(records(t, l)) != 0 {
			t.Fatalf("ran %d times with %d records, want 10 and none", n, len(records(t, l)))
		}
		// The list is configurable.
		putURL := guarded(t, l, &idemhttp.Options{Methods: []string{"PUT"}}, h)
		do(t, "PUT", putURL, `{}`, "Idempotency-Key: p")
		do(t, "PUT", putURL, `{}`, "Idempotency-Key: p")
		do(t, "POST", putURL, `{}`, "Idempotency-Key: p")
		if n := h.count("p"); n != 2 {
			t.Fatalf("PUT guarded, POST not: ran %d times, want 2", n)
		}
	})
}

// Same key under two credentials: two executions, no leak, and a request
// in flight in one scope never makes the other answer 409.
func TestScopesNeverMeet(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		started, release := make(chan struct{}, 1), make(chan struct{})
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			if r.Header.Get("Authorization") == "Bearer alice" {
				started <- struct{}{}
				<-release
			}
			w.WriteHeader(201)
			io.WriteString(w, "for "+r.Header.Get("Authorization"))
			return true
		}
		url := guarded(t, l, nil, h)
		done := make(chan reply)
		go func() { done <- do(t, "POST", url, `{}`, "Idempotency-Key: k", "Authorization: Bearer alice") }()
		<-started
		bob := do(t, "POST", url, `{}`, "Idempotency-Key: k", "Authorization: Bearer bob")
		if bob.status != 201 || bob.body != "for Bearer bob" {
			t.Fatalf("bob got %d %q while alice's request was in flight", bob.status, bob.body)
		}
		close(release)
		alice := <-done
		for range 2 {
			if r := do(t, "POST", url, `{}`, "Idempotency-Key: k", "Authorization: Bearer alice"); r.body != alice.body {
				t.Fatalf("alice's replay: %q", r.body)
			}
			if r := do(t, "POST", url, `{}`, "Idempotency-Key: k", "Authorization: Bearer bob"); r.body != "for Bearer bob" {
				t.Fatalf("bob's replay: %q", r.body)
			}
		}
		if n := h.count("k"); n != 2 {
			t.Fatalf("ran %d times, want 2 (one per scope)", n)
		}
		for _, rec := range records(t, l) {
			if strings.Contains(rec.Scope, "alice") || strings.Contains(rec.Scope, "bob") {
				t.Fatalf("scope stores the credential: %q", rec.Scope)
			}
		}
	})
}

func TestScopeHeader(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	url := guarded(t, l, &idemhttp.Options{Scope: idemhttp.ScopeHeader("X-Tenant-ID")}, h)
	do(t, "POST", url, `{}`, "Idempotency-Key: k", "X-Tenant-ID: t1")
	do(t, "POST", url, `{}`, "Idempotency-Key: k", "X-Tenant-ID: t2")
	do(t, "POST", url, `{}`, "Idempotency-Key: k", "X-Tenant-ID: t1", "Authorization: other")
	if n := h.count("k"); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
	wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: k", "X-Tenant-ID: "+strings.Repeat("t", 300)), 400, idemhttp.ProblemScopeInvalid)
}

func TestKeyFromBody(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		var mu sync.Mutex
		runs := 0
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			runs++
			n := runs
			mu.Unlock()
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(200)
			io.WriteString(w, strings.Repeat("!", n)+string(b))
		})
		url := guarded(t, l, &idemhttp.Options{KeyFrom: "json:/payment/idempotency_key", RequireKey: true}, h)
		first := do(t, "POST", url, `{"payment":{"idempotency_key":"sq-1","amount":5}}`)
		if first.status != 200 || !strings.HasSuffix(first.body, `"amount":5}}`) {
			t.Fatalf("handler did not get the body back: %d %q", first.status, first.body)
		}
		if r := do(t, "POST", url, `{"payment":{"amount":5,"idempotency_key":"sq-1"}}`); r.body != first.body {
			t.Fatalf("replay: %q", r.body)
		}
		wantProblem(t, do(t, "POST", url, `{"payment":{"idempotency_key":"sq-1","amount":6}}`), 422, idemhttp.ProblemKeyMismatch)
		wantProblem(t, do(t, "POST", url, `{"payment":{"amount":5}}`), 400, idemhttp.ProblemKeyMissing)
		wantProblem(t, do(t, "POST", url, `{"payment":{"idempotency_key":5}}`), 400, idemhttp.ProblemKeyInvalid)
		wantProblem(t, do(t, "POST", url, `{"payment":{"idempotency_key":""}}`), 400, idemhttp.ProblemKeyInvalid)
		wantProblem(t, do(t, "POST", url, `{"payment":`), 400, idemhttp.ProblemBodyInvalid)

		form := guarded(t, l, &idemhttp.Options{KeyFrom: "form:code"}, h)
		send := func(body string) reply {
			req, _ := http.NewRequest("POST", form+"/token", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return reply{resp.StatusCode, resp.Header, string(b)}
		}
		a := send("grant_type=authorization_code&code=c1&code_verifier=v")
		b := send("code=c1&code_verifier=v&grant_type=authorization_code")
		if a.status != 200 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("form replay: %q then %q", a.body, b.body)
		}
		if r := send("grant_type=authorization_code&code=c1&code_verifier=w"); r.status != 422 {
			t.Fatalf("a different verifier: %d", r.status)
		}
	})
}

// The client goes away while the handler works; the handler finishes, the
// key records its response, and the retry gets it without a second run.
func TestClientDisconnect(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		gone := make(chan struct{})
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done() // the client is gone
			close(gone)
			return false // …and the handler answers anyway
		}
		url := guarded(t, l, nil, h)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		if _, err := http.DefaultClient.Do(req); err == nil {
			t.Fatal("request was not cancelled")
		}
		<-gone
		var r reply
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if r = do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 409 {
				break
			}
		}
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || h.count("k") != 1 {
			t.Fatalf("retry got %d %v after %d runs; want the stored 201", r.status, r.header, h.count("k"))
		}
	})
}

func TestReleaseAndUnknown(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			switch r.URL.Path {
			case "/release":
				idemhttp.Release(r.Context())
			case "/unknown":
				idemhttp.Unknown(r.Context())
			}
			w.WriteHeader(400)
			return true
		}
		url := guarded(t, l, &idemhttp.Options{Lease: 300 * time.Millisecond}, h)
		do(t, "POST", url+"/release", `{}`, "Idempotency-Key: r")
		do(t, "POST", url+"/release", `{}`, "Idempotency-Key: r")
		if n := h.count("r"); n != 2 {
			t.Fatalf("released key ran %d times, want 2", n)
		}
		do(t, "POST", url+"/unknown", `{}`, "Idempotency-Key: u")
		wantProblem(t, do(t, "POST", url+"/unknown", `{}`, "Idempotency-Key: u"), 409, idemhttp.ProblemInFlight)
		time.Sleep(400 * time.Millisecond)
		do(t, "POST", url+"/unknown", `{}`, "Idempotency-Key: u")
		if n := h.count("u"); n != 2 {
			t.Fatalf("unknown key ran %d times, want 2 (again after its lease)", n)
		}
	})
}

func TestExpiredKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{Retention: 100 * time.Millisecond}, h)
		do(t, "POST", url, `{}`, "Idempotency-Key: k")
		time.Sleep(200 * time.Millisecond)
		wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: k"), 410, idemhttp.ProblemKeyExpired)
		if n := h.count("k"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// A handler that panics before answering leaves its claim to the lease.
func TestPanicLeavesClaim(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		if h.count("k") == 1 {
			panic(http.ErrAbortHandler)
		}
		return false
	}
	url := guarded(t, l, &idemhttp.Options{Lease: 300 * time.Millisecond}, h)
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d from a panicking handler", resp.StatusCode)
	}
	wantProblem(t, do(t, "POST", url, `{}`, "Idempotency-Key: k"), 409, idemhttp.ProblemInFlight)
	time.Sleep(400 * time.Millisecond)
	if r := do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 201 {
		t.Fatalf("after the lease: %d", r.status)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	for _, o := range []idemhttp.Options{
		{KeyFrom: "cookie:x"}, {KeyFrom: "json:x"}, {KeyFrom: "json:/a~2"}, {MaxBody: -1},
		{AllowHeaders: []string{"set-cookie"}}, {AllowHeaders: []string{"WWW-Authenticate"}}, {AllowHeaders: []string{"www-authenticate"}},
		{AllowHeaders: []string{"Proxy-Authenticate"}}, {Exclude: []string{"nope"}}, {OnConflict: 7},
	} {
		if _, err := idemhttp.New(l, &o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// 401, 403, 408, 425 and 429 mean "nothing was done": passed through, not
// stored, key released; ReleaseStatus changes the set.
func TestReleaseStatuses(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		answering := func() *counter {
			h := newCounter()
			h.before = func(w http.ResponseWriter, r *http.Request) bool {
				code, _ := strconv.Atoi(r.Header.Get("Answer"))
				w.Header().Set("Retry-After", "1")
				http.Error(w, "try later", code)
				return true
			}
			return h
		}
		h := answering()
		url := guarded(t, l, nil, h)
		for _, code := range []int{401, 403, 408, 425, 429} {
			key := "Idempotency-Key: k" + strconv.Itoa(code)
			for range 2 {
				if r := do(t, "POST", url, `{}`, key, "Answer: "+strconv.Itoa(code)); r.status != code || r.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("%d: got %d %v", code, r.status, r.header)
				}
			}
			if n := h.count("k" + strconv.Itoa(code)); n != 2 {
				t.Fatalf("%d: ran %d times, want 2 (released each time)", code, n)
			}
		}
		do(t, "POST", url, `{}`, "Idempotency-Key: k400", "Answer: 400")
		if r := do(t, "POST", url, `{}`, "Idempotency-Key: k400", "Answer: 400"); r.header.Get("Idempotent-Replayed") != "true" || h.count("k400") != 1 {
			t.Fatalf("400 not stored: %d %v", r.status, r.header)
		}

		h = answering()
		url = guarded(t, l, &idemhttp.Options{ReleaseStatus: []int{}}, h)
		do(t, "POST", url, `{}`, "Idempotency-Key: none429", "Answer: 429")
		if r := do(t, "POST", url, `{}`, "Idempotency-Key: none429", "Answer: 429"); r.header.Get("Idempotent-Replayed") != "true" || h.count("none429") != 1 {
			t.Fatalf("ReleaseStatus {}: 429 not stored: %d %v", r.status, r.header)
		}
	})
	l := openLedger(t, "sqlite")
	for _, bad := range [][]int{{200}, {503}, {42}} {
		if _, err := idemhttp.New(l, &idemhttp.Options{ReleaseStatus: bad}); err == nil {
			t.Errorf("ReleaseStatus %v accepted", bad)
		}
	}
}

// A guarded request with a key but no credential never meets another
// caller's stored answer: by default it is refused, naming the fix; with
// AnonymousShared it is handled in one shared scope.
func TestAnonymousRefused(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, nil, h)
		r := do(t, "POST", url, `{}`, "Idempotency-Key: k", "Authorization:", "Cookie: session=alice")
		wantProblem(t, r, 400, idemhttp.ProblemScopeMissing)
		for _, fix := range []string{"--scope-header", "--anonymous-scope shared", "AnonymousShared"} {
			if !strings.Contains(r.body, fix) {
				t.Errorf("the refusal does not name the fix %q: %s", fix, r.body)
			}
		}
		if h.total() != 0 || len(records(t, l)) != 0 {
			t.Fatalf("refused request ran (%d) or claimed (%d records)", h.total(), len(records(t, l)))
		}
		if r := do(t, "POST", url, `{}`, "Authorization:"); r.status != 201 {
			t.Fatalf("a request without key or credential should pass through unguarded: %d", r.status)
		}

		shared := guarded(t, l, &idemhttp.Options{AnonymousScope: idemhttp.AnonymousShared}, h)
		a := do(t, "POST", shared, `{}`, "Idempotency-Key: s", "Authorization:")
		b := do(t, "POST", shared, `{}`, "Idempotency-Key: s", "Authorization:")
		if a.status != 201 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("AnonymousShared: %d %q / %q", a.status, a.body, b.body)
		}
	})
}

// The scope of an Authorization header is a keyed hash under a secret kept
// in the database: neither the ledger nor a log line holds the plain
// SHA-256 an attacker could crack a weak credential from. Two middlewares
// on one database agree on it; another database has another secret.
func TestScopeIsKeyedHash(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		const auth = "Basic dXNlcjpwYXNzd29yZA==" // user:password
		sum := sha256.Sum256([]byte(auth))
		plain := hex.EncodeToString(sum[:])
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := newCounter()
		mw1, _ := idemhttp.New(l, &idemhttp.Options{Logger: log})
		mw2, _ := idemhttp.New(l, &idemhttp.Options{Logger: log})
		one, two := serve(t, mw1(h)).URL, serve(t, mw2(h)).URL
		first := do(t, "POST", one, `{}`, "Idempotency-Key: k", "Authorization: "+auth)
		if r := do(t, "POST", two, `{}`, "Idempotency-Key: k", "Authorization: "+auth); r.body != first.body || h.count("k") != 1 {
			t.Fatalf("a second middleware on the same database computed another scope: %q vs %q", r.body, first.body)
		}
		recs := records(t, l)
		if len(recs) != 1 || !strings.HasPrefix(recs[0].Scope, "authorization-hmac:") || strings.Contains(recs[0].Scope, plain) {
			t.Fatalf("stored scope %q: want a keyed hash, not the SHA-256 %s", recs[0].Scope, plain)
		}
		mu.Lock()
		logged := logs.String()
		mu.Unlock()
		if strings.Contains(logged, plain) || strings.Contains(logged, auth) || !strings.Contains(logged, recs[0].Scope) {
			t.Fatalf("logs hold a crackable digest or the credential, or not the scope:\n%s", logged)
		}

		other := openLedger(t, "sqlite")
		do(t, "POST", guarded(t, other, nil, h), `{}`, "Idempotency-Key: k", "Authorization: "+auth)
		if s := records(t, other)[0].Scope; s == recs[0].Scope {
			t.Fatalf("two databases share a scope secret: %q", s)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A replay carries what describes its body: a report a POST made comes
// back with its file name and language, so a second download is saved
// as the first was.
func TestReplayDescribesItsBody(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		url := guarded(t, l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/csv")
			w.Header().Set("Content-Disposition", `attachment; filename="report-2026-12.csv"`)
			w.Header().Set("Content-Language", "de")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "id,amount\n1,1000\n")
		}))
		first := do(t, "POST", url+"/reports", `{"month":"2026-12"}`, "Idempotency-Key: report-1")
		again := do(t, "POST", url+"/reports", `{"month":"2026-12"}`, "Idempotency-Key: report-1")
		if again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body {
			t.Fatalf("not a replay: %d %v", again.status, again.header)
		}
		for _, h := range []string{"Content-Type", "Content-Disposition", "Content-Language"} {
			if again.header.Get(h) != first.header.Get(h) {
				t.Errorf("%s: replay %q, first %q", h, again.header.Get(h), first.header.Get(h))
			}
		}
	})
}
