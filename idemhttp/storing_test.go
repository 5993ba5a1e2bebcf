package idemhttp

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/ledgertest"
)

// A transaction-bound write of a spilled body does not wait for room in
// storing: on SQLite its transaction holds the one writer, which the
// lease-bound writes holding that room may be waiting for. With all the
// room taken, the request still completes (waiting, it would end with its
// context and a 503). Not parallel: it holds the process's storing.
func TestTxWriteDoesNotWaitForStoringRoom(t *testing.T) {
	l := ledgertest.Open(t, "sqlite")
	if !storing.TryAcquire(storingBytes) {
		t.Fatal("storing is in use")
	}
	defer storing.Release(storingBytes)
	body := bytes.Repeat([]byte("0123456789"), 30<<10)
	mw, err := NewTx(l, &Options{AnonymousScope: AnonymousShared, SpillDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fail rather than hang
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/charges", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("%d, %d bytes; want 200 and %d", w.Code, w.Body.Len(), len(body))
	}
}
