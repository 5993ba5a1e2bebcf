package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
)

// TestFingerprintHTTPMatchesMiddleware checks issue 10, item 7: for the
// request a 422 reports, `idem fingerprint --http` prints the fingerprint
// the middleware (and so the gateway) computed and stored. Each case sends
// a first request, then another with the same key; the middleware's 422
// line logs both fingerprints.
func TestFingerprintHTTPMatchesMiddleware(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var logs bytes.Buffer
	mw, err := idemhttp.New(l, &idemhttp.Options{
		Scope:   func(*http.Request) string { return "test" },
		Methods: []string{"POST", "PUT", "DELETE"},
		Exclude: []string{"/sent_at"},
		Logger:  slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))

	// coding "gzip" sends the body compressed; the command is given it
	// decoded, as the docs say (gunzip < body.gz | idem fingerprint --http).
	type request struct{ method, target, contentType, body, coding string }
	tests := []struct {
		name          string
		first, second request
	}{
		{"json body and query", request{"POST", "/charges?x=1&b=2", "application/json", `{"amount": 100, "sent_at": "now"}`, ""}, request{"POST", "/charges?x=1&b=2", "application/json", `{"amount":101}`, ""}},
		{"other path", request{"POST", "/charges/a%2Fb", "application/json; charset=utf-8", `{"amount":100}`, ""}, request{"POST", "/refunds", "application/json", `{"amount":100}`, ""}},
		{"big account numbers", request{"POST", "/payouts", "application/json", `{"to_account":9007199254740993}`, ""}, request{"POST", "/payouts", "application/json", `{"to_account":9007199254740992}`, ""}},
		{"form body", request{"POST", "/forms", "application/x-www-form-urlencoded", "b=2&a=1&sent_at=x", ""}, request{"POST", "/forms", "application/x-www-form-urlencoded", "a=1&b=3", ""}},
		{"json as form, as curl -d sends", request{"POST", "/curl", "application/x-www-form-urlencoded", `{"a":1}`, ""}, request{"POST", "/curl", "application/x-www-form-urlencoded", `{"a":2}`, ""}},
		{"text body", request{"PUT", "/text", "text/plain", "hello", ""}, request{"PUT", "/text", "text/plain", "hello!", ""}},
		{"empty body", request{"DELETE", "/things/1", "", "", ""}, request{"DELETE", "/things/2", "", "", ""}},
		{"multipart body", request{"POST", "/files", "multipart/form-data; boundary=b1", "--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--b1--\r\n", ""},
			request{"POST", "/files", "multipart/form-data; boundary=b2", "--b2\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello!\r\n--b2--\r\n", ""}},
		{"gzip body", request{"POST", "/uploads", "application/json", `{"amount":100}`, "gzip"}, request{"POST", "/uploads", "application/json", `{"amount":100,"x":1}`, "gzip"}},
	}
	for i, tt := range tests {
		key := fmt.Sprintf("key-%d", i)
		send := func(rq request) int {
			body := rq.body
			if rq.coding == "gzip" {
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				zw.Write([]byte(body))
				zw.Close()
				body = b.String()
			}
			r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(body))
			r.Header.Set("Idempotency-Key", key)
			if rq.coding != "" {
				r.Header.Set("Content-Encoding", rq.coding)
			}
			if rq.contentType != "" {
				r.Header.Set("Content-Type", rq.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		logs.Reset()
		if code := send(tt.first); code != http.StatusCreated {
			t.Fatalf("%s: first request: %d, want 201", tt.name, code)
		}
		if code := send(tt.second); code != http.StatusUnprocessableEntity {
			t.Fatalf("%s: second request: %d, want 422", tt.name, code)
		}
		var line struct{ Fingerprint, StoredFingerprint string }
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "key reused with a different request") {
				var raw map[string]any
				if err := json.Unmarshal([]byte(l), &raw); err != nil {
					t.Fatal(err)
				}
				line.Fingerprint, _ = raw["fingerprint"].(string)
				line.StoredFingerprint, _ = raw["stored_fingerprint"].(string)
			}
		}
		if line.Fingerprint == "" || line.StoredFingerprint == "" {
			t.Fatalf("%s: no 422 log line with both fingerprints in:\n%s", tt.name, logs.String())
		}
		for _, c := range []struct {
			rq   request
			want string
		}{{tt.first, line.StoredFingerprint}, {tt.second, line.Fingerprint}} {
			args := []string{"--http", "--exclude", "/sent_at", "--content-type", c.rq.contentType, c.rq.method, c.rq.target}
			var stdout, stderr bytes.Buffer
			if code := runFingerprint(ctx, args, strings.NewReader(c.rq.body), &stdout, &stderr); code != 0 {
				t.Fatalf("%s: idem fingerprint %q: exit %d: %s", tt.name, args, code, stderr.String())
			}
			out := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(out) != 6 || out[0] != "idemhttp/v1" {
				t.Fatalf("%s: output %q, want six lines: the five of the input, then the fingerprint", tt.name, stdout.String())
			}
			if got := out[5]; got != c.want {
				t.Errorf("case %d %s: idem fingerprint %q prints %s; the middleware computed %s", i, tt.name, args, got, c.want)
			}
		}
	}
}
