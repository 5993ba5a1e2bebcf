package idemhttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// http.ResponseController reaches the connection through the middleware.
func TestResponseControllerThrough(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline: %v", err)
		}
		if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetReadDeadline: %v", err)
		}
		return false
	}
	url := guarded(t, l, nil, h)
	if r := do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 201 {
		t.Fatalf("got %d", r.status)
	}
}

// A handler that hijacks the connection answers itself; the key records
// that its response cannot be replayed.
func TestHijack(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return true
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nraw ok")
		rw.Flush()
		return true
	}
	url := guarded(t, l, nil, h)
	if r := do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.body != "raw ok" {
		t.Fatalf("got %d %q", r.status, r.body)
	}
	var r reply
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r = do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 409 {
			break
		}
	}
	wantProblem(t, r, 410, idemhttp.ProblemResponseNotStored)
}

// Bodies sent as curl -d sends them (JSON labelled as a form) are compared
// as JSON; a body declared JSON that is not JSON is refused before any
// database access.
func TestBodyKinds(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := newCounter()
	url := guarded(t, l, nil, h)
	send := func(ct, key, body string) reply {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(b)}
	}
	const form = "application/x-www-form-urlencoded"
	first := send(form, "curl", `{"amount":1000,"currency":"eur"}`)
	if r := send(form, "curl", `{ "currency": "eur", "amount": 1000 }`); r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("JSON sent as a form: %d %q", r.status, r.body)
	}
	if r := send(form, "curl", `{"amount":1001,"currency":"eur"}`); r.status != 422 {
		t.Fatalf("changed JSON sent as a form: %d", r.status)
	}
	// Real forms: field order does not matter, values do.
	a := send("application/x-www-form-urlencoded; charset=utf-8", "form", "b=2&a=1")
	if r := send("application/x-www-form-urlencoded; charset=utf-8", "form", "a=1&b=2"); a.status != 201 || r.body != a.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("form field order changed the fingerprint: %q", r.body)
	}
	if r := send("application/x-www-form-urlencoded", "form", "a=1&b=3"); r.status != 422 {
		t.Fatalf("changed form: %d", r.status)
	}
	// Other bodies are compared as bytes.
	p := send("text/plain", "plain", "hello")
	if r := send("text/plain", "plain", "hello "); r.status != 422 || p.status != 201 {
		t.Fatalf("plain bodies: %d then %d", p.status, r.status)
	}
	before := len(records(t, l))
	wantProblem(t, send("application/json", "bad", "{nope"), 400, idemhttp.ProblemBodyInvalid)
	if len(records(t, l)) != before {
		t.Fatal("a malformed JSON body reached the ledger")
	}
}

// A handler's trailers (announced in Trailer, or set with
// http.TrailerPrefix after the body, as a reverse proxy copies an
// upstream's) reach the first client as trailers, not as header fields;
// a replay has none.
func TestTrailersStayTrailers(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		for _, mode := range []string{"lease", "tx"} {
			t.Run(mode, func(t *testing.T) {
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Trailer", "X-Checksum")
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, `{"ok":true}`)
					w.Header().Set("X-Checksum", "abc123")
					w.Header().Set(http.TrailerPrefix+"X-Late", "late")
				})
				url := guarded(t, l, nil, h)
				if mode == "tx" {
					url = txGuarded(t, l, nil, h)
				}
				get := func() (*http.Response, string) {
					t.Helper()
					req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
					req.Header.Set("Idempotency-Key", "trailers-"+mode)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body) // the trailers come after the body
					return resp, string(b)
				}
				first, body := get()
				if body != `{"ok":true}` || first.Header.Get("X-Checksum") != "" || first.Trailer.Get("X-Checksum") != "abc123" || first.Trailer.Get("X-Late") != "late" {
					t.Fatalf("first answer: %q, header %v, trailer %v", body, first.Header, first.Trailer)
				}
				again, body := get()
				if body != `{"ok":true}` || again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("X-Checksum") != "" || len(again.Trailer) != 0 {
					t.Fatalf("replay: %q, header %v, trailer %v", body, again.Header, again.Trailer)
				}
			})
		}
	})
}
