package idemhttp_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
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

// counter is a handler that counts its runs per key and answers 201 with a
// body naming the run, a Location, a Set-Cookie and a custom header.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
	// before, when set, runs first (to block, fail or write differently).
	before func(w http.ResponseWriter, r *http.Request) bool
}

func newCounter() *counter { return &counter{runs: map[string]int{}} }

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.runs[r.Header.Get("Idempotency-Key")]++
	n := c.runs[r.Header.Get("Idempotency-Key")]
	c.mu.Unlock()
	if c.before != nil && c.before(w, r) {
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/ch_1")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Private", "not stored")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"run":`+strconv.Itoa(n)+`,"got":`+strconv.Quote(string(body))+`}`)
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.runs {
		n += v
	}
	return n
}

// reply is a response read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handlers that panic on purpose
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// do sends one request; hdr is "Name: value" pairs.
func do(t testing.TB, method, url, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ":")
		if strings.EqualFold(k, "Content-Type") {
			req.Header.Del(k) // replaces the default
		}
		req.Header.Add(k, strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func (r reply) problemType() string {
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	i := strings.Index(r.body, `"type":"`)
	if i < 0 {
		return ""
	}
	rest := r.body[i+len(`"type":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

func wantProblem(t *testing.T, r reply, status int, typ string) {
	t.Helper()
	if r.status != status || r.problemType() != typ {
		t.Fatalf("got %d %s %q, want %d problem %s", r.status, r.header.Get("Content-Type"), r.body, status, typ)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("problem without Cache-Control: no-store")
	}
}

func records(t *testing.T, l *idem.Ledger) []idemtype.Record {
	t.Helper()
	recs, err := l.List(context.Background(), idemtype.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

var _ = idemhttp.ProblemBase
