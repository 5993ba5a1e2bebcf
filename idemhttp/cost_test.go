package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
)

// BenchmarkMiddlewareCost is the middleware's own cost per guarded
// request (a new key: a claim, the handler, a completion), with the
// database taken out: the ledger runs on memDriver, a map. What it
// measures is what idemhttp and the ledger's Go code spend, the part a
// faster database cannot buy back. Compare with -benchmem:
//
//	go test ./idemhttp -run '^$' -bench MiddlewareCost -benchmem
func BenchmarkMiddlewareCost(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1","amount":1000,"currency":"eur"}`))
	})
	b.Run("bare", func(b *testing.B) { runCost(b, handler) })
	b.Run("idemhttp", func(b *testing.B) {
		l, err := idem.New(b.Context(), &memDriver{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		mw, err := idemhttp.New(l, nil)
		if err != nil {
			b.Fatal(err)
		}
		runCost(b, mw(handler))
	})
}

func runCost(b *testing.B, h http.Handler) {
	const body = `{"amount":1000,"currency":"eur"}`
	b.ReportAllocs()
	var seq int
	for b.Loop() {
		seq++
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(seq))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

// memDriver keeps the ledger in a map: just enough of driver.Driver for
// a new key's claim and completion. The embedded nil Driver panics on
// any other method, which the benchmark never reaches.
type memDriver struct {
	driver.Driver
	mu   sync.Mutex
	keys map[[2]string]idemtype.Record
}

func (m *memDriver) Name() string { return "memory" }

func (m *memDriver) Setup(context.Context, driver.Config) error {
	m.keys = map[[2]string]idemtype.Record{}
	return nil
}

func (m *memDriver) Close() error { return nil }

func (m *memDriver) Secret(_ context.Context, _ string, fresh []byte) ([]byte, error) {
	return fresh, nil
}

func (m *memDriver) Claim(_ context.Context, _ driver.Executor, p driver.ClaimParams) (idemtype.Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{p.Scope, p.Key}
	if r, ok := m.keys[k]; ok {
		return r, false, nil
	}
	now := time.Now()
	r := p.Created(now.Add(p.Lease), now)
	m.keys[k] = r
	return r, true, nil
}

func (m *memDriver) Finish(_ context.Context, _ driver.Executor, p driver.FinishParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{p.Scope, p.Key}
	r, ok := m.keys[k]
	if !ok || r.State != idemtype.StateInProgress || r.Attempt != p.Attempt || r.LeaseID != p.LeaseID {
		return driver.ErrFenced
	}
	// The finished record is dropped, not kept: a database keeps it off
	// the Go heap, and a map holding every request's response would make
	// the benchmark measure the collector scanning it. No key is reused.
	delete(m.keys, k)
	return nil
}
