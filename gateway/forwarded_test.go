package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/idemdev/idem/gateway"
)

// forwardedEcho answers the forwarding headers it got, as JSON.
func forwardedEcho() *upstream {
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{
			"for": r.Header.Get("X-Forwarded-For"), "host": r.Header.Get("X-Forwarded-Host"),
			"proto": r.Header.Get("X-Forwarded-Proto"), "forwarded": r.Header.Get("Forwarded"),
		})
	}
	return up
}

// Behind a load balancer that terminates TLS (TrustedProxies), the
// upstream learns the client's address, the public host and https, as it
// would without the gateway; from a peer not trusted (the default) the
// gateway sets the headers itself, so a client cannot forge them. Guarded
// and unguarded requests alike.
func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := serveQuiet(t, forwardedEcho()).URL
	fromLB := []string{"X-Forwarded-For: 203.0.113.7", "X-Forwarded-Host: api.example.com", "X-Forwarded-Proto: https",
		"Forwarded: for=203.0.113.7;host=api.example.com;proto=https", "Authorization: Bearer a"}
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		want    map[string]string
	}{
		{"none trusted", nil, map[string]string{"for": "127.0.0.1", "proto": "http", "forwarded": ""}},
		{"another network trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, map[string]string{"for": "127.0.0.1", "proto": "http", "forwarded": ""}},
		{"the peer trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")},
			map[string]string{"for": "203.0.113.7, 127.0.0.1", "host": "api.example.com", "proto": "https", "forwarded": "for=203.0.113.7;host=api.example.com;proto=https"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := newGateway(t, l, up, &gateway.Config{TrustedProxies: tt.trusted})
			for _, method := range []string{"POST", "GET"} {
				req, _ := http.NewRequest(method, gw+"/charges", nil)
				req.Header.Set("Idempotency-Key", "fwd-"+strings.ReplaceAll(tt.name, " ", "-"))
				for _, h := range fromLB {
					k, v, _ := splitHeader(h)
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var got map[string]string
				if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusCreated {
					t.Fatalf("%s: %d %q: %v", method, resp.StatusCode, b, err)
				}
				if tt.want["host"] == "" {
					tt.want["host"] = req.URL.Host // what the gateway saw
				}
				for k, v := range tt.want {
					if got[k] != v {
						t.Errorf("%s: upstream got %s %q, want %q (all: %v)", method, k, got[k], v, got)
					}
				}
			}
		})
	}
}

// splitHeader splits "Name: value".
func splitHeader(h string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(h, ":")
	return name, strings.TrimSpace(value), ok
}

// PreserveHost sends the upstream the Host the client asked for, guarded
// or not; by default the upstream gets its own. A Location the upstream
// builds from the Host it got then names the public host already and is
// passed on as it is; a redirect the gateway follows keeps the Host.
func TestPreserveHost(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/old" { // moved: a redirect the gateway follows for a guarded request
			w.Header().Set("Location", "/charges")
			w.WriteHeader(http.StatusPermanentRedirect)
			return
		}
		w.Header().Set("Location", "http://"+r.Host+"/charges/1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Host)
	}
	upURL := serveQuiet(t, up).URL
	upHost := strings.TrimPrefix(upURL, "http://")
	for _, tt := range []struct {
		preserve bool
		want     string
	}{{false, upHost}, {true, "api.example.com"}} {
		gw := newGateway(t, l, upURL, &gateway.Config{PreserveHost: tt.preserve})
		for _, c := range []struct{ method, path string }{{"POST", "/charges"}, {"GET", "/charges"}, {"POST", "/old"}} {
			req, _ := http.NewRequest(c.method, gw+c.path, strings.NewReader(`{}`))
			req.Host = "api.example.com"
			req.Header.Set("Idempotency-Key", fmt.Sprintf("host-%v%s", tt.preserve, c.path))
			req.Header.Set("Authorization", "Bearer a")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || string(b) != tt.want {
				t.Errorf("PreserveHost %v, %s %s: %d, upstream got Host %q, want %q", tt.preserve, c.method, c.path, resp.StatusCode, b, tt.want)
			}
			if loc := resp.Header.Get("Location"); loc != "http://api.example.com/charges/1" {
				t.Errorf("PreserveHost %v, %s %s: Location %q, want the public host's", tt.preserve, c.method, c.path, loc)
			}
		}
	}
}
