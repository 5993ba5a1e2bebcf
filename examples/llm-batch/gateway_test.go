package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/sqlite"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
)

// TestThroughGateway sends the same batch, line by line and without any
// key, through the gateway in front of the model, configured as
//
//	idem serve --upstream MODEL --key-from fingerprint --exclude /id,/idempotency_key --anonymous-scope shared
//
// The key is the fingerprint of the work, sent on to the model as
// Idempotency-Key: the model runs each distinct input once, and a repeated
// line gets the first line's answer, replayed by the gateway.
func TestThroughGateway(t *testing.T) {
	ctx := context.Background()
	m := &model{runs: map[string]int{}, answers: map[string]string{}}
	up := httptest.NewServer(m)
	defer up.Close()
	u, _ := url.Parse(up.URL)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	l, err := idem.New(ctx, sqlite.New(db, &sqlite.Options{CloseDB: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	quiet := slog.New(slog.DiscardHandler)
	g, err := gateway.New(l, &gateway.Config{Upstream: u, Logger: quiet, Options: &idemhttp.Options{
		KeyFrom:        idemhttp.KeyFromFingerprint,
		Exclude:        []string{"/id", "/idempotency_key"},
		AnonymousScope: idemhttp.AnonymousShared,
		Logger:         quiet,
	}})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	defer gw.Close()

	answers := map[string]string{} // by line id
	sc := bufio.NewScanner(strings.NewReader(batch))
	for sc.Scan() {
		var line struct{ ID string }
		json.Unmarshal(sc.Bytes(), &line)
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(sc.Text()))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("line %s: %d %s", line.ID, resp.StatusCode, b)
		}
		answers[line.ID] = string(b)
	}
	if answers["c"] != answers["a"] || answers["e"] != answers["b"] {
		t.Errorf("repeated work got another answer: a %q c %q; b %q e %q", answers["a"], answers["c"], answers["b"], answers["e"])
	}
	if answers["d"] == answers["a"] || answers["f"] == answers["a"] {
		t.Errorf("other work (another model, another temperature) got the first answer: %q", answers)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests != 4 || len(m.runs) != 4 {
		t.Errorf("the model got %d requests for %d distinct inputs, want 4 and 4: repeats reach it", m.requests, len(m.runs))
	}
}
