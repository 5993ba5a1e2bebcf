package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// CheckCORSOrigins reports the first entry of a Config.CORSOrigins list
// that is neither "*" nor an origin: a scheme (http or https) and a host,
// with an optional port and nothing else (https://shop.example,
// http://localhost:3000), as a browser sends it in Origin.
func CheckCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") {
			return fmt.Errorf("CORS origin %q: want * or scheme://host[:port], such as https://shop.example", o)
		}
	}
	return nil
}

// corsPolicy is Config.CORSOrigins, ready to answer.
type corsPolicy struct {
	any     bool
	origins map[string]bool
}

// newCORSPolicy builds the policy for origins, nil when there are none.
// The origins have been checked.
func newCORSPolicy(origins []string) *corsPolicy {
	if len(origins) == 0 {
		return nil
	}
	p := &corsPolicy{origins: map[string]bool{}}
	for _, o := range origins {
		if o == "*" {
			p.any = true
			continue
		}
		p.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return p
}

// allow returns the Access-Control-Allow-Origin value for a request from
// origin ("" when the origin is not allowed), and whether credentials may
// go with it: only for an origin named in the list, never for "*".
func (p *corsPolicy) allow(origin string) (value string, credentials bool) {
	switch {
	case origin == "" || origin == "null":
		return "", false
	case p.origins[origin]:
		return origin, true
	case p.any:
		return "*", false
	}
	return "", false
}

// answeredKey carries, in a request's context, the flag the proxy sets
// when the upstream's answer arrives.
type answeredKey struct{}

// markAnswered records that resp is the upstream's answer, for a request
// that carries the flag.
func markAnswered(resp *http.Response) {
	if a, ok := resp.Request.Context().Value(answeredKey{}).(*atomic.Bool); ok {
		a.Store(true)
	}
}

// withCORS wraps w for a request from a page on an allowed origin, so
// that the gateway's own answers carry CORS fields; other requests are
// returned as they are.
func (p *corsPolicy) withCORS(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if p == nil {
		return w, r
	}
	allow, credentials := p.allow(r.Header.Get("Origin"))
	if allow == "" {
		return w, r
	}
	cw := &corsWriter{ResponseWriter: w, allow: allow, credentials: credentials}
	return cw, r.WithContext(context.WithValue(r.Context(), answeredKey{}, &cw.answered))
}

// corsWriter adds CORS fields to the gateway's own answers: its problems
// (409 request-in-flight, 422 key-mismatch, 502 upstream-unreachable, …),
// written before any answer came from the upstream. The upstream's
// answers, and replays of them, carry the upstream's own CORS fields or
// none: the gateway never widens the upstream's policy.
type corsWriter struct {
	http.ResponseWriter
	allow       string
	credentials bool
	answered    atomic.Bool
	wrote       bool
}

// WriteHeader adds the fields to an own answer's header, then writes it.
// Informational answers (1xx) pass as they are.
func (w *corsWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		h := w.Header()
		if !w.answered.Load() && h.Get("Idempotent-Replayed") == "" && h.Get("Access-Control-Allow-Origin") == "" {
			h.Set("Access-Control-Allow-Origin", w.allow)
			if w.credentials {
				h.Set("Access-Control-Allow-Credentials", "true")
				h.Add("Vary", "Origin")
			}
			h.Set("Access-Control-Expose-Headers", "Retry-After")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes the header first if it has not been.
func (w *corsWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *corsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends what is buffered (a streamed answer's chunks).
func (w *corsWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}
