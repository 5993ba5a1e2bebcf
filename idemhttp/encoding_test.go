package idemhttp_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// gzipping answers gzip to a client that accepts it, as a handler (or an
// outer middleware) that compresses does.
func gzipping(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		h.ServeHTTP(gzipWriter{w, zw}, r)
	})
}

type gzipWriter struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g gzipWriter) Write(p []byte) (int, error) { return g.zw.Write(p) }

// decoded is what a client that decodes makes of a reply.
func decoded(t *testing.T, r reply) string {
	t.Helper()
	if r.header.Get("Content-Encoding") != "gzip" {
		return r.body
	}
	zr, err := gzip.NewReader(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("Content-Encoding gzip, but the body is not gzip: %v", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A handler that compresses: every replay decodes to what the first answer
// decoded to, for a client that accepts gzip and for one that does not,
// whichever of them came first.
func TestCompressedReplay(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		for _, mode := range []string{"lease", "tx"} {
			t.Run(mode, func(t *testing.T) {
				h := newCounter()
				url := guarded(t, l, nil, gzipping(h))
				if mode == "tx" {
					url = txGuarded(t, l, nil, gzipping(h))
				}
				clients := map[string]string{"gzip": "Accept-Encoding: gzip, deflate", "identity": "Accept-Encoding: identity", "gzip;q=0": "Accept-Encoding: gzip;q=0, *;q=0"}
				for _, first := range []string{"gzip", "identity"} {
					key := "Idempotency-Key: " + mode + "-" + first
					a := do(t, "POST", url, `{"amount":1}`, key, clients[first])
					want := decoded(t, a)
					if a.status != 201 || !strings.HasPrefix(want, `{"run":1`) {
						t.Fatalf("first answer (%s): %d %q", first, a.status, want)
					}
					for name, ae := range clients {
						r := do(t, "POST", url, `{"amount":1}`, key, ae)
						if r.header.Get("Idempotent-Replayed") != "true" || decoded(t, r) != want {
							t.Fatalf("first %s, replay to %s: %v %q, want %q", first, name, r.header, decoded(t, r), want)
						}
						if name != "gzip" && r.header.Get("Content-Encoding") != "" {
							t.Fatalf("replay to a client that does not accept gzip is labelled %q", r.header.Get("Content-Encoding"))
						}
					}
				}
			})
		}
	})
}

var _ = idemhttp.ProblemBase
