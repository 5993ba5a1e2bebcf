package gateway_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
)

// Routes get their own options; unmatched requests get Config.Options;
// SetRoutes swaps all of them, and a bad set keeps the old one.
func TestRoutes(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := newUpstream()
		u, _ := url.Parse(serveQuiet(t, up).URL)
		g, err := gateway.New(l, &gateway.Config{Upstream: u, Logger: quiet, Routes: []gateway.Route{
			{Pattern: "POST /payments", Options: &idemhttp.Options{RequireKey: true}},
			{Pattern: "POST /hooks/{provider}", Options: &idemhttp.Options{KeyFrom: idemhttp.KeyFromFingerprint, Exclude: []string{"/sent_at"}}},
			{Pattern: "POST /open/", Pass: true},
		}})
		if err != nil {
			t.Fatal(err)
		}
		gw := serveQuiet(t, g).URL

		wantProblem(t, post(t, gw+"/payments", `{}`), 400, idemhttp.ProblemKeyMissing)
		if r := post(t, gw+"/charges", `{}`); r.status != 201 {
			t.Fatalf("unmatched keyless request: %d %q, want it passed through", r.status, r.body)
		}
		a := post(t, gw+"/hooks/stripe", `{"id":"ev_1","sent_at":1}`)
		b := post(t, gw+"/hooks/stripe", `{"id":"ev_1","sent_at":2}`)
		if a.status != 201 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("webhook redelivery: %d %q / %q %v", a.status, a.body, b.body, b.header)
		}
		post(t, gw+"/open/x", `{}`, "Idempotency-Key: o1")
		post(t, gw+"/open/x", `{}`, "Idempotency-Key: o1")
		if n := up.count("o1"); n != 2 {
			t.Fatalf("a pass-through route reached the upstream %d times, want 2", n)
		}

		err = g.SetRoutes(nil, []gateway.Route{{Pattern: "POST /payments"}, {Pattern: "POST /payments"}})
		if err == nil || !strings.Contains(err.Error(), "POST /payments") {
			t.Fatalf("conflicting routes: %v", err)
		}
		err = g.SetRoutes(nil, []gateway.Route{{Pattern: "POST /x", Options: &idemhttp.Options{KeyFrom: "cookie:x"}}})
		if err == nil || !strings.Contains(err.Error(), `route "POST /x"`) {
			t.Fatalf("bad route options: %v", err)
		}
		wantProblem(t, post(t, gw+"/payments", `{}`), 400, idemhttp.ProblemKeyMissing) // the old routes stay

		if err := g.SetRoutes(nil, nil); err != nil {
			t.Fatal(err)
		}
		if r := post(t, gw+"/payments", `{}`); r.status != 201 {
			t.Fatalf("after the routes were dropped: %d %q", r.status, r.body)
		}
	})
}
