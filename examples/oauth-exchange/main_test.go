package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem/dburl"
)

func exchange(t *testing.T, url, code, verifier string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
		"client_id": "demo-client", "redirect_uri": "http://127.0.0.1/callback"})
	resp, err := http.Post(url+"/token", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDoubleExchange(t *testing.T) {
	l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	as := newAuthServer()

	// Without idem, the second exchange of a code fails.
	bare := httptest.NewServer(http.HandlerFunc(as.token))
	defer bare.Close()
	code, verifier := as.issue("demo-client", "http://127.0.0.1/callback")
	exchange(t, bare.URL, code, verifier)
	if status, body := exchange(t, bare.URL, code, verifier); status != 400 || !strings.Contains(body, "invalid_grant") {
		t.Fatalf("bare second exchange: %d %s", status, body)
	}

	// With idem, the retry gets the first token response.
	srv := httptest.NewServer(newHandler(l, as))
	defer srv.Close()
	code, verifier = as.issue("demo-client", "http://127.0.0.1/callback")
	s1, first := exchange(t, srv.URL, code, verifier)
	s2, second := exchange(t, srv.URL, code, verifier)
	if s1 != 200 || !strings.Contains(first, "access_token") || s2 != 200 || second != first {
		t.Fatalf("double exchange: %d %s / %d %s", s1, first, s2, second)
	}
	// A different verifier with the same code never gets the token.
	if status, body := exchange(t, srv.URL, code, "stolen"); status != 422 || strings.Contains(body, "access_token") {
		t.Fatalf("same code, another verifier: %d %s", status, body)
	}
}
