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

func TestChi(t *testing.T) {
	l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var orders atomic.Int64
	srv := httptest.NewServer(newRouter(l, &orders))
	defer srv.Close()
	post := func(path, key string) (int, string, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"item":"tea"}`))
		req.Header.Set("Authorization", "Bearer sk_test_1") // keys are scoped by credential
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}
	s1, _, b1 := post("/orders/berlin", "o-1")
	s2, replayed, b2 := post("/orders/berlin", "o-1")
	s3, _, _ := post("/orders/paris", "o-1")
	if s1 != 201 || s2 != 201 || replayed != "true" || b2 != b1 || s3 != 422 || orders.Load() != 1 {
		t.Fatalf("chi: %d %d %q %q/%q %d, %d orders", s1, s2, replayed, b1, b2, s3, orders.Load())
	}
	if s, _, _ := post("/orders/berlin", ""); s != 400 {
		t.Fatalf("missing key: %d", s)
	}
}
