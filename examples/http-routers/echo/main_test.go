package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemdev/idem/dburl"
)

func TestEcho(t *testing.T) {
	l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var orders atomic.Int64
	srv := httptest.NewServer(newServer(l, &orders))
	defer srv.Close()
	post := func(path, key, body string) (int, string, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_1") // keys are scoped by credential
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}
	s1, _, b1 := post("/orders/berlin", "o-1", `{"item":"tea"}`)
	s2, replayed, b2 := post("/orders/berlin", "o-1", `{ "item": "tea" }`)
	if s1 != 201 || s2 != 201 || replayed != "true" || b1 != b2 || orders.Load() != 1 {
		t.Fatalf("echo: %d %d %q %q/%q, %d orders", s1, s2, replayed, b1, b2, orders.Load())
	}
	// A handler error is rendered inside the middleware and replayed.
	e1, _, eb1 := post("/orders/berlin", "o-2", `{}`)
	e2, replayed, eb2 := post("/orders/berlin", "o-2", `{}`)
	if e1 != 400 || e2 != 400 || replayed != "true" || eb1 != eb2 {
		t.Fatalf("echo error: %d %q, then %d %q %q", e1, eb1, e2, replayed, eb2)
	}
}
