package gateway_test

import (
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/idemdev/idem/gateway"
)

// redirecting is an upstream that redirects as web frameworks do, building
// absolute URLs from the Host it was sent (the upstream's own). prefix is
// the path it is mounted under.
type redirecting struct {
	prefix string
	mu     sync.Mutex
	got    map[string][]string // path → bodies and keys received, "key body"
}

// seen returns what path received.
func (u *redirecting) seen(path string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[path]
}

func (u *redirecting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got[r.URL.Path] = append(u.got[r.URL.Path], r.Header.Get("Idempotency-Key")+" "+string(b))
	n := len(u.got[r.URL.Path])
	u.mu.Unlock()
	abs := "http://" + r.Host + u.prefix
	switch strings.TrimPrefix(r.URL.Path, u.prefix) {
	case "/items": // FastAPI's trailing-slash redirect
		w.Header().Set("Location", abs+"/items/")
		w.WriteHeader(http.StatusTemporaryRedirect)
	case "/v1/charges": // moved, relative
		w.Header().Set("Location", u.prefix+"/v2/charges")
		w.WriteHeader(http.StatusPermanentRedirect)
	case "/away":
		w.Header().Set("Location", "https://elsewhere.example/x")
		w.WriteHeader(http.StatusTemporaryRedirect)
	case "/loop":
		w.Header().Set("Location", abs+"/loop")
		w.WriteHeader(http.StatusTemporaryRedirect)
	case "/form": // post/redirect/get: done, see the result
		w.Header().Set("Location", abs+"/done")
		w.WriteHeader(http.StatusSeeOther)
	default:
		w.Header().Set("Location", abs+"/charges/ch_"+string(rune('0'+n)))
		w.Header().Set("Link", "<"+abs+"/charges?page=2>; rel=\"next\", <https://docs.example/charges>; rel=\"help\"")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.URL.Path+" "+string(b))
	}
}

// A guarded POST the upstream redirects to itself (307, 308) is followed
// by the gateway with its body and key: the client gets the answer it
// wanted, stored for the request it made, and a retry its replay, one
// effect. Locations naming the upstream's own address come back naming
// the gateway, so that nothing a client follows goes around it; other
// redirects, and 303, are the answer.
func TestRedirectToItself(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	for _, prefix := range []string{"", "/api"} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			t.Parallel()
			up := &redirecting{prefix: prefix, got: map[string][]string{}}
			srv := serveQuiet(t, up)
			gw := newGateway(t, l, srv.URL+prefix, nil)
			gwHost := strings.TrimPrefix(gw, "http://")
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			send := func(method, path, key string, hdr ...string) reply {
				t.Helper()
				req, _ := http.NewRequest(method, gw+path, strings.NewReader(`{"amount":1}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer a")
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				for _, h := range hdr {
					k, v, _ := strings.Cut(h, ":")
					req.Header.Set(k, strings.TrimSpace(v))
				}
				resp, err := noFollow.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return reply{resp.StatusCode, resp.Header, string(b)}
			}
			for _, tt := range []struct{ path, final string }{{"/items", "/items/"}, {"/v1/charges", "/v2/charges"}} {
				key := "k" + strings.ReplaceAll(prefix+tt.path, "/", "-")
				a := send("POST", tt.path, key)
				b := send("POST", tt.path, key)
				if a.status != 201 || a.body != prefix+tt.final+` {"amount":1}` || b.header.Get("Idempotent-Replayed") != "true" || b.body != a.body {
					t.Fatalf("POST %s: %d %q, again %d %v %q", tt.path, a.status, a.body, b.status, b.header, b.body)
				}
				if got := up.seen(prefix + tt.final); len(got) != 1 || got[0] != key+` {"amount":1}` {
					t.Fatalf("POST %s: the upstream's %s got %q, want the body and key once", tt.path, prefix+tt.final, got)
				}
				if loc := a.header.Get("Location"); loc != "http://"+gwHost+"/charges/ch_1" {
					t.Errorf("POST %s: Location %q, want the gateway's", tt.path, loc)
				}
				if link := a.header.Get("Link"); link != `<http://`+gwHost+`/charges?page=2>; rel="next", <https://docs.example/charges>; rel="help"` {
					t.Errorf("POST %s: Link %q, want the next page's at the gateway and the help link as it was", tt.path, link)
				}
				if loc := b.header.Get("Location"); loc != a.header.Get("Location") {
					t.Errorf("POST %s: the replay's Location %q, want %q", tt.path, loc, a.header.Get("Location"))
				}
			}
			for _, tt := range []struct {
				method, path, key string
				status            int
				location          string
			}{
				{"POST", "/away", "k-away", 307, "https://elsewhere.example/x"},
				{"POST", "/loop", "k-loop", 307, "http://" + gwHost + "/loop"},
				{"POST", "/form", "k-form", 303, "http://" + gwHost + "/done"},
				{"GET", "/items", "", 307, "http://" + gwHost + "/items/"},
			} {
				key := tt.key
				if key != "" {
					key += strings.ReplaceAll(prefix, "/", "-")
				}
				r := send(tt.method, tt.path, key)
				if r.status != tt.status || r.header.Get("Location") != tt.location {
					t.Errorf("%s %s: %d Location %q, want %d %q", tt.method, tt.path, r.status, r.header.Get("Location"), tt.status, tt.location)
				}
			}
			if n := len(up.seen(prefix + "/loop")); n != 6 {
				t.Errorf("a redirect loop was followed %d times, want 5 after the first", n-1)
			}
		})
	}
}

// Behind a trusted load balancer a Location comes back naming the public
// host and scheme the balancer says the client used.
func TestRedirectBehindProxy(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := &redirecting{got: map[string][]string{}}
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	r := post(t, gw+"/charges", `{}`, "Idempotency-Key: lb", "Authorization: Bearer a",
		"X-Forwarded-Proto: https", "X-Forwarded-Host: api.example.com")
	if r.status != 201 || r.header.Get("Location") != "https://api.example.com/charges/ch_1" {
		t.Fatalf("%d Location %q", r.status, r.header.Get("Location"))
	}
}
