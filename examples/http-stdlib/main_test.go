package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemdev/idem/dburl"
)

func TestStdlibExample(t *testing.T) {
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := &bank{}
	h, err := newHandler(ctx, l, b)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(path, key string) string {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"amount":1000}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer sk_test_1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(body)
	}
	var wg sync.WaitGroup
	got := make([]string, 10)
	for i := range got {
		wg.Go(func() { got[i] = post("/payments", "p-1") })
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] || !strings.HasPrefix(g, "201") {
			t.Fatalf("payments: %q vs %q", g, got[0])
		}
	}
	var rows int
	l.Driver().DB().QueryRow(`SELECT count(*) FROM payments`).Scan(&rows)
	if rows != 1 {
		t.Fatalf("%d payment rows, want 1", rows)
	}
	first := post("/payouts", "po-1")
	if again := post("/payouts", "po-1"); again != first || b.moved != 1 {
		t.Fatalf("payouts: %q then %q, %d transfers", first, again, b.moved)
	}
}
