package idemhttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// Large responses are held partly in a temporary file: the first answer
// and the replays carry the whole body, byte for byte, with the
// Content-Type net/http would sniff, whether the handler declared its
// length or wrote it in pieces, in both modes, and with no usable
// temporary directory (the body is then held in memory). No file is left.
func TestLargeResponses(t *testing.T) {
	t.Parallel()
	body := []byte("<html><p>" + strings.Repeat("0123456789abcdef", 300<<10/16) + "</p></html>")
	handler := func(declared bool) http.Handler {
		h := newCounter()
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			if declared {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				w.Write(body)
				return true
			}
			for b := body; len(b) > 0; {
				n := min(len(b), 1000)
				w.Write(b[:n])
				b = b[n:]
			}
			return true
		}
		return h
	}
	for _, missing := range []bool{false, true} {
		eachDriver(t, func(t *testing.T, l *idem.Ledger) {
			for _, tx := range []bool{false, true} {
				for _, declared := range []bool{false, true} {
					h := handler(declared)
					dir := t.TempDir()
					opts := &idemhttp.Options{SpillDir: dir}
					url := guarded(t, l, opts, h)
					if tx {
						url = txGuarded(t, l, opts, h)
					}
					if missing { // there when the middleware was made, gone now
						os.Remove(dir)
					}
					key := fmt.Sprintf("big-%v-%v", tx, declared)
					for i := range 2 {
						r := do(t, "POST", url, `{}`, "Idempotency-Key: "+key)
						if r.status != 200 || r.body != string(body) || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
							t.Fatalf("dir missing %v, tx %v, declared %v, answer %d: %d, %q, %d bytes, want all %d", missing, tx, declared, i, r.status, r.header.Get("Content-Type"), len(r.body), len(body))
						}
					}
					if n := h.(*counter).count(key); n != 1 {
						t.Fatalf("handled %d times", n)
					}
					if left, _ := os.ReadDir(dir); len(left) != 0 {
						t.Fatalf("left in the spill directory: %v", left)
					}
				}
			}
		})
	}
}

// Many large responses at once, each key sent twice at the same time:
// every key's handler runs once, and every answer, first or replayed, is
// that key's own body byte for byte (a buffer or a copy read back from a
// file handed to the wrong request, or reused while a write still read
// it, would show here, and under -race).
func TestLargeResponsesConcurrent(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		bodyOf := func(key string) []byte {
			return []byte(strings.Repeat(key+"/", 700<<10/(len(key)+1)))
		}
		h := newCounter()
		h.before = func(w http.ResponseWriter, r *http.Request) bool {
			body := bodyOf(r.Header.Get("Idempotency-Key"))
			for b := body; len(b) > 0; { // in pieces, as a proxy copies
				n := min(len(b), 32<<10)
				w.Write(b[:n])
				b = b[n:]
			}
			return true
		}
		url := guarded(t, l, &idemhttp.Options{OnConflict: idemhttp.Wait, WaitTimeout: time.Minute, SpillDir: t.TempDir()}, h)
		const keys = 32
		var wg sync.WaitGroup
		errs := make(chan string, 2*keys)
		for i := range keys {
			key := fmt.Sprintf("key-%02d", i)
			for range 2 {
				wg.Go(func() {
					r := do(t, "POST", url, `{}`, "Idempotency-Key: "+key)
					if r.status != 200 || r.body != string(bodyOf(key)) {
						errs <- fmt.Sprintf("%s: %d, %d bytes, starting %.20q", key, r.status, len(r.body), r.body)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		for i := range keys {
			if n := h.count(fmt.Sprintf("key-%02d", i)); n != 1 {
				t.Errorf("key-%02d handled %d times", i, n)
			}
		}
	})
}

// A SpillDir that is not a directory is refused when the middleware is
// made, not found out on the first large answer.
func TestSpillDirChecked(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		_, err := idemhttp.New(l, &idemhttp.Options{SpillDir: dir})
		var in *idem.InputError
		if !errors.As(err, &in) || in.Field != "SpillDir" || !strings.Contains(err.Error(), dir) {
			t.Errorf("SpillDir %s: %v, want an input error naming it", dir, err)
		}
	}
}
