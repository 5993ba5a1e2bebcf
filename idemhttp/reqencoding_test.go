package idemhttp_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// compress returns s in coding, as a client that compresses its uploads
// sends it. gzip writes mtime into its header, so two uploads of one
// document made at different times differ.
func compress(t *testing.T, coding, s string, mtime time.Time) string {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		zw := gzip.NewWriter(&b)
		zw.ModTime = mtime
		w = zw
	case "deflate":
		w = zlib.NewWriter(&b)
	case "raw deflate":
		w, _ = flate.NewWriter(&b, flate.BestSpeed)
	case "br":
		w = brotli.NewWriter(&b)
	case "zstd":
		zw, err := zstd.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("no coding %s", coding)
	}
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// uploads records what the handler was given: the body as it came and its
// Content-Encoding.
type uploads struct {
	mu     sync.Mutex
	bodies []string
	coding []string
}

func (u *uploads) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, string(b))
		u.coding = append(u.coding, r.Header.Get("Content-Encoding"))
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		next.ServeHTTP(w, r)
	})
}

// A request body sent compressed is fingerprinted by what it decodes to:
// compressed again at another time, in another coding or sent plain, it
// is the same request and gets the replay; compressed content that
// differs is a mismatch. The handler gets the body as it was sent.
func TestCompressedRequestBody(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		for _, mode := range []string{"lease", "tx"} {
			t.Run(mode, func(t *testing.T) {
				h, up := newCounter(), &uploads{}
				url := guarded(t, l, nil, up.handler(h))
				if mode == "tx" {
					url = txGuarded(t, l, nil, up.handler(h))
				}
				key := "Idempotency-Key: up-" + mode
				doc := `{"amount":1000,"currency":"eur"}`
				first := compress(t, "gzip", doc, time.Unix(1, 0))
				a := do(t, "POST", url, first, key, "Content-Encoding: gzip")
				if a.status != 201 || a.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("first: %d %q", a.status, a.body)
				}
				if len(up.bodies) != 1 || up.bodies[0] != first || up.coding[0] != "gzip" {
					t.Fatalf("the handler got %q (%q), want the gzip body as sent", up.bodies, up.coding)
				}
				same := map[string][]string{
					"gzip, another mtime":     {compress(t, "gzip", doc, time.Unix(2, 0)), "Content-Encoding: gzip"},
					"x-gzip":                  {compress(t, "gzip", doc, time.Unix(3, 0)), "Content-Encoding: X-Gzip"},
					"plain":                   {doc},
					"plain, keys reordered":   {`{"currency":"eur", "amount":1000}`, "Content-Encoding: identity"},
					"deflate":                 {compress(t, "deflate", doc, time.Time{}), "Content-Encoding: deflate"},
					"raw deflate":             {compress(t, "raw deflate", doc, time.Time{}), "Content-Encoding: deflate"},
					"br":                      {compress(t, "br", doc, time.Time{}), "Content-Encoding: br"},
					"zstd":                    {compress(t, "zstd", doc, time.Time{}), "Content-Encoding: zstd"},
					"gzip then zstd":          {compress(t, "zstd", compress(t, "gzip", doc, time.Unix(4, 0)), time.Time{}), "Content-Encoding: gzip, zstd"},
					"gzip then br, two lines": {compress(t, "br", compress(t, "gzip", doc, time.Unix(5, 0)), time.Time{}), "Content-Encoding: gzip", "Content-Encoding: br"},
				}
				for name, req := range same {
					r := do(t, "POST", url, req[0], append([]string{key}, req[1:]...)...)
					if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || r.body != a.body {
						t.Errorf("%s: %d %v %q, want the replay of %q", name, r.status, r.header, r.body, a.body)
					}
				}
				r := do(t, "POST", url, compress(t, "gzip", `{"amount":999,"currency":"eur"}`, time.Unix(1, 0)), key, "Content-Encoding: gzip")
				wantProblem(t, r, http.StatusUnprocessableEntity, idemhttp.ProblemKeyMismatch)
				if n := h.total(); n != 1 {
					t.Fatalf("the handler ran %d times, want 1", n)
				}
			})
		}
	})
}

// A body in a coding the middleware does not decode (an encrypted
// aes128gcm body, RFC 8188) is fingerprinted as its bytes: resent as it
// was, it gets the replay; other bytes, or the same bytes uncoded, are a
// mismatch.
func TestUnknownCodingIsBytes(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, nil, h)
		key, coded := "Idempotency-Key: aes", "Content-Encoding: aes128gcm"
		a := do(t, "POST", url, `{"sealed":1}`, key, coded)
		if a.status != 201 {
			t.Fatalf("first: %d %q", a.status, a.body)
		}
		if r := do(t, "POST", url, `{"sealed":1}`, key, coded); r.header.Get("Idempotent-Replayed") != "true" || r.body != a.body {
			t.Fatalf("same bytes: %d %q", r.status, r.body)
		}
		wantProblem(t, do(t, "POST", url, `{"sealed":2}`, key, coded), http.StatusUnprocessableEntity, idemhttp.ProblemKeyMismatch)
		r := do(t, "POST", url, `{"sealed":1}`, key)
		wantProblem(t, r, http.StatusUnprocessableEntity, idemhttp.ProblemKeyMismatch)
		if n := h.total(); n != 1 {
			t.Fatalf("the handler ran %d times, want 1", n)
		}
	})
}

// A body that does not decode as its Content-Encoding says, or that
// decodes to more than MaxBody (a small gzip of zeros), is refused before
// anything is claimed: the key stays free and the handler is not called.
func TestBadCompressedBody(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		const maxBody = 256 << 10
		url := guarded(t, l, &idemhttp.Options{MaxBody: maxBody}, h)
		bomb := compress(t, "gzip", `{"pad":"`+strings.Repeat("0", 100<<20)+`"}`, time.Time{})
		if len(bomb) > maxBody {
			t.Fatalf("the bomb is %d bytes compressed, over MaxBody itself", len(bomb))
		}
		zeros := compress(t, "zstd", strings.Repeat("0", maxBody+1), time.Time{})
		for _, tt := range []struct {
			name, body, coding string
			status             int
			typ                string
		}{
			{"not gzip", `{"amount":1}`, "gzip", 400, idemhttp.ProblemBodyInvalid},
			{"truncated gzip", compress(t, "gzip", `{"amount":1}`, time.Time{})[:20], "gzip", 400, idemhttp.ProblemBodyInvalid},
			{"not br", "\xff\xff\xff\xff", "br", 400, idemhttp.ProblemBodyInvalid},
			{"not zstd", `{"amount":1}`, "zstd", 400, idemhttp.ProblemBodyInvalid},
			{"gzip bomb", bomb, "gzip", 413, idemhttp.ProblemBodyTooLarge},
			{"one byte over", zeros, "zstd", 413, idemhttp.ProblemBodyTooLarge},
		} {
			r := do(t, "POST", url, tt.body, "Idempotency-Key: bad-"+strings.ReplaceAll(tt.name, " ", "-"), "Content-Encoding: "+tt.coding)
			wantProblem(t, r, tt.status, tt.typ)
		}
		if n := h.total(); n != 0 {
			t.Fatalf("the handler ran %d times, want 0", n)
		}
		if recs := records(t, l); len(recs) != 0 {
			t.Fatalf("records left: %v", recs)
		}
		// The key was not taken: the same key with a good body runs.
		if r := do(t, "POST", url, compress(t, "gzip", `{"amount":1}`, time.Time{}), "Idempotency-Key: bad-not-gzip", "Content-Encoding: gzip"); r.status != 201 {
			t.Fatalf("good body after a bad one: %d %q", r.status, r.body)
		}
	})
}

// A key read from a compressed body is read from what it decodes to; a
// body in a coding the middleware does not decode cannot give a key: 415,
// with the codings it decodes in Accept-Encoding (RFC 9110, 15.5.16).
func TestKeyFromCompressedBody(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{KeyFrom: "json:/idempotency_key"}, h)
		doc := `{"idempotency_key":"sq-1","amount":5}`
		a := do(t, "POST", url, compress(t, "gzip", doc, time.Unix(1, 0)), "Content-Encoding: gzip")
		b := do(t, "POST", url, compress(t, "br", doc, time.Time{}), "Content-Encoding: br")
		if a.status != 201 || b.header.Get("Idempotent-Replayed") != "true" || b.body != a.body {
			t.Fatalf("first %d %q; again %d %v %q", a.status, a.body, b.status, b.header, b.body)
		}
		r := do(t, "POST", url, doc, "Content-Encoding: aes128gcm")
		wantProblem(t, r, http.StatusUnsupportedMediaType, idemhttp.ProblemBodyEncoding)
		if got := r.header.Get("Accept-Encoding"); got != idemhttp.RequestCodings {
			t.Fatalf("Accept-Encoding %q, want %q", got, idemhttp.RequestCodings)
		}
		if n := h.total(); n != 1 {
			t.Fatalf("the handler ran %d times, want 1", n)
		}
	})
}

// A stored br or zstd answer is decoded for a retry that does not accept
// it (curl without --compressed after a browser's first request), as gzip
// and deflate are.
func TestReplayDecodesBrAndZstd(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		for _, coding := range []string{"br", "zstd"} {
			t.Run(coding, func(t *testing.T) {
				const doc = `{"id":"ch_1","amount":1000}`
				coded := compress(t, coding, doc, time.Time{})
				url := guarded(t, l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Content-Encoding", coding)
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, coded)
				}))
				key := "Idempotency-Key: answer-" + coding
				if a := do(t, "POST", url, `{}`, key, "Accept-Encoding: gzip, deflate, br, zstd"); a.status != 201 || a.body != coded {
					t.Fatalf("first: %d %q", a.status, a.body)
				}
				r := do(t, "POST", url, `{}`, key, "Accept-Encoding: identity")
				if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Content-Encoding") != "" || r.body != doc {
					t.Fatalf("replay to a client without %s: %v %q, want %q", coding, r.header, r.body, doc)
				}
				if r := do(t, "POST", url, `{}`, key, "Accept-Encoding: "+coding); r.header.Get("Content-Encoding") != coding || r.body != coded {
					t.Fatalf("replay to a client with %s: %v %q", coding, r.header, r.body)
				}
			})
		}
	})
}

// A JSON body that starts with a UTF-8 byte order mark (as some Windows
// clients write it) is the same request as without it, and a key in it is
// read.
func TestJSONByteOrderMark(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{KeyFrom: "json:/idempotency_key"}, h)
		a := do(t, "POST", url, "\xef\xbb\xbf"+`{"idempotency_key":"bom-1","amount":5}`)
		b := do(t, "POST", url, `{"amount":5,"idempotency_key":"bom-1"}`)
		if a.status != 201 || b.header.Get("Idempotent-Replayed") != "true" || b.body != a.body || h.total() != 1 {
			t.Fatalf("with a byte order mark %d %q; without %d %v %q; %d runs", a.status, a.body, b.status, b.header, b.body, h.total())
		}
	})
}

// An HTML form with a file input posts multipart/form-data; its hidden
// idempotency field is the key (KeyFrom "form:NAME"), and the form posted
// again, with the browser's new boundary, gets the replay: a double
// submit runs once.
func TestKeyFromMultipartForm(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{KeyFrom: "form:idempotency_key"}, h)
		post := func(boundary, key string) reply {
			t.Helper()
			body := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"idempotency_key\"\r\n\r\n" + key + "\r\n" +
				"--" + boundary + "\r\nContent-Disposition: form-data; name=\"receipt\"; filename=\"r.pdf\"\r\nContent-Type: application/pdf\r\n\r\n%PDF-1.7\r\n" +
				"--" + boundary + "--\r\n"
			return do(t, "POST", url, body, "Content-Type: multipart/form-data; boundary="+boundary)
		}
		a := post("----WebKitFormBoundaryA", "form-1")
		b := post("----WebKitFormBoundaryB", "form-1")
		if a.status != 201 || b.header.Get("Idempotent-Replayed") != "true" || b.body != a.body || h.count("") != 1 {
			t.Fatalf("first %d %q; again %d %v %q; %d runs", a.status, a.body, b.status, b.header, b.body, h.total())
		}
		if c := post("----WebKitFormBoundaryC", "form-2"); c.status != 201 || c.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("another key: %d %v", c.status, c.header)
		}
		r := do(t, "POST", url, "--x\r\nbroken", "Content-Type: multipart/form-data; boundary=x")
		wantProblem(t, r, http.StatusBadRequest, idemhttp.ProblemBodyInvalid)
	})
}
