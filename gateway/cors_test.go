package gateway_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
)

// corsFields is what a reply carries of CORS.
func corsFields(r reply) string {
	return fmt.Sprintf("origin=%q credentials=%q expose=%q vary=%q", r.header.Values("Access-Control-Allow-Origin"),
		r.header.Get("Access-Control-Allow-Credentials"), r.header.Get("Access-Control-Expose-Headers"), r.header.Get("Vary"))
}

// With CORSOrigins, the gateway's own answers to a page on a listed
// origin carry CORS fields: a 409 while the first request runs, a 422 for
// a key reused, a 502 when the upstream is down. The upstream's answers
// and their replays carry the upstream's own fields or none, never the
// gateway's: the list widens nothing the upstream decided. Other origins,
// and requests without one, get none.
func TestOwnAnswersCarryCORS(t *testing.T) {
	t.Parallel()
	const shop = "https://shop.example"
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			close(arrived)
			<-release
		case "/cors":
			w.Header().Set("Access-Control-Allow-Origin", shop)
		}
		w.WriteHeader(http.StatusCreated)
	}
	l := openLedger(t, "sqlite")
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{CORSOrigins: []string{shop, "http://localhost:3000"}})
	auth := "Authorization: Bearer page"
	from := func(origin string) []string { return []string{auth, "Origin: " + origin} }
	own := `origin=["https://shop.example"] credentials="true" expose="Retry-After" vary="Origin"`
	none := `origin=[] credentials="" expose="" vary=""`

	for _, tt := range []struct {
		name string
		r    reply
		want string
	}{
		{"the upstream's answer without CORS", post(t, gw+"/plain", `{"a":1}`, append(from(shop), "Idempotency-Key: k1")...), none},
		{"its replay", post(t, gw+"/plain", `{"a":1}`, append(from(shop), "Idempotency-Key: k1")...), none},
		{"422 key reused", post(t, gw+"/plain", `{"a":2}`, append(from(shop), "Idempotency-Key: k1")...), own},
		{"422 from an origin not listed", post(t, gw+"/plain", `{"a":2}`, append(from("https://evil.example"), "Idempotency-Key: k1")...), none},
		{"422 without Origin", post(t, gw+"/plain", `{"a":2}`, auth, "Idempotency-Key: k1"), none},
		{"400 key invalid", post(t, gw+"/plain", `{}`, append(from(shop), "Idempotency-Key: a,b")...), own},
		{"the upstream's own CORS answer", post(t, gw+"/cors", `{}`, append(from(shop), "Idempotency-Key: k2")...),
			`origin=["https://shop.example"] credentials="" expose="" vary=""`},
		{"its replay", post(t, gw+"/cors", `{}`, append(from(shop), "Idempotency-Key: k2")...),
			`origin=["https://shop.example"] credentials="" expose="Idempotent-Replayed" vary=""`},
	} {
		if got := corsFields(tt.r); got != tt.want {
			t.Errorf("%s (%d): %s, want %s", tt.name, tt.r.status, got, tt.want)
		}
	}

	first := make(chan reply)
	go func() { first <- post(t, gw+"/slow", `{}`, append(from(shop), "Idempotency-Key: k3")...) }()
	select { // until the first is at the upstream
	case <-arrived:
	case r := <-first:
		t.Fatalf("the first request: %d %s", r.status, r.body)
	}
	second := post(t, gw+"/slow", `{}`, append(from(shop), "Idempotency-Key: k3")...)
	close(release)
	wantProblem(t, second, http.StatusConflict, idemhttp.ProblemInFlight)
	if got := corsFields(second); got != own || second.header.Get("Retry-After") == "" {
		t.Errorf("409 in flight: %s, Retry-After %q; want %s", got, second.header.Get("Retry-After"), own)
	}
	if r := <-first; r.status != http.StatusCreated || corsFields(r) != none {
		t.Errorf("the first request: %d %s", r.status, corsFields(r))
	}

	down := serveQuiet(t, up)
	downURL := down.URL
	down.Close()
	gwAny := newGateway(t, l, downURL, &gateway.Config{CORSOrigins: []string{"*"}})
	r := post(t, gwAny+"/plain", `{}`, append(from("https://any.example"), "Idempotency-Key: k4")...)
	wantProblem(t, r, http.StatusBadGateway, idemhttp.ProblemUpstreamDown)
	if got := corsFields(r); got != `origin=["*"] credentials="" expose="Retry-After" vary=""` {
		t.Errorf("502 with *: %s", got)
	}
}

// A CORSOrigins entry that is not an origin is refused by name.
func TestCORSOriginsChecked(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1")
	for _, bad := range []string{"shop.example", "https://shop.example/pay", "ftp://shop.example", "https://", "https://shop.example?x=1", "https://u@shop.example"} {
		if _, err := gateway.New(nil, &gateway.Config{Upstream: u, CORSOrigins: []string{"https://ok.example", bad}}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("%q: %v, want an error naming it", bad, err)
		}
	}
	for _, ok := range []string{"*", "http://localhost:3000", "https://shop.example", "https://shop.example/"} {
		if err := gateway.CheckCORSOrigins([]string{ok}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
