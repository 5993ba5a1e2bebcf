package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/metrics"
)

const hostileKey = `<script>alert("k")</script>`

// fixture is a seeded ledger and the collector that watched it.
type fixture struct {
	url string
	l   *idem.Ledger // the page's ledger, on the real clock
	m   *metrics.Collector
}

// seed makes a ledger with, on the real clock:
//
//	acct-1 / done-1     succeeded, 201, {"id":"ch_1"}; replayed once, mismatched once
//	"" / parked-1       parked
//	"" / <script>…      parked (a hostile key)
//	"" / stale-1        in progress, lease ended an hour ago
//	"" / live-1         in progress under a live lease
func seed(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	f := fixture{url: "sqlite:" + filepath.Join(t.TempDir(), "idem.db"), m: metrics.New("sqlite")}
	quiet := slog.New(slog.DiscardHandler)

	past, err := dburl.Open(ctx, f.url, &idem.Options{Logger: quiet, Clock: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := past.Claim(ctx, idem.Op{Key: "stale-1", Fingerprint: "fp-stale", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	past.Close()

	l, err := dburl.Open(ctx, f.url, &idem.Options{Logger: quiet, Observer: f.m.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f.l = l
	must := func(c *idem.Claim, err error) *idem.Claim {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	done := must(l.Claim(ctx, idem.Op{Scope: "acct-1", Key: "done-1", Fingerprint: "fp-done"}))
	if err := l.Complete(ctx, done, idem.Result{Status: 201, Body: []byte(`{"id":"ch_1"}`)}); err != nil {
		t.Fatal(err)
	}
	must(l.Claim(ctx, idem.Op{Scope: "acct-1", Key: "done-1", Fingerprint: "fp-done"}))  // replay
	must(l.Claim(ctx, idem.Op{Scope: "acct-1", Key: "done-1", Fingerprint: "fp-other"})) // mismatch
	for _, k := range []string{"parked-1", hostileKey} {
		if err := l.Park(ctx, must(l.Claim(ctx, idem.Op{Key: k, Fingerprint: "fp-" + k}))); err != nil {
			t.Fatal(err)
		}
	}
	must(l.Claim(ctx, idem.Op{Key: "live-1", Lease: time.Hour}))
	return f
}

// serve starts the page on a loopback test server.
func serve(t *testing.T, f fixture, opts *admin.Options) *httptest.Server {
	t.Helper()
	o := admin.Options{Metrics: f.m, Logger: slog.New(slog.DiscardHandler)}
	if opts != nil {
		o = *opts
		o.Metrics, o.Logger = f.m, slog.New(slog.DiscardHandler)
	}
	h, err := admin.New(f.l, &o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestPageShowsCountsTotalsAndLists(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, nil)
	code, body, hdr := get(t, client(t), srv.URL+"/")
	if code != 200 {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	for _, want := range []string{
		`id="count-parked">2<`, `id="count-stale">1<`, `id="count-in-progress">2<`,
		`id="total-duplicates">1<`, `id="total-mismatches">1<`, `id="total-reclaims">0<`,
		"parked-1", "stale-1", `<svg id="chart"`, "<polyline", `id="jobs-off"`, "read-only",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "Resolve…") || strings.Contains(body, `action="/reconcile"`) {
		t.Error("read-only page offers the reconcile form")
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if _, css, _ := get(t, client(t), srv.URL+"/static/style.css"); !strings.Contains(css, "polyline") && !strings.Contains(css, ".line") {
		t.Error("embedded stylesheet not served")
	}
}

func TestHostileKeysAreEscaped(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, &admin.Options{Write: true})
	for _, u := range []string{"/", "/?scope=&key=" + url.QueryEscape(hostileKey), "/?scope=" + url.QueryEscape(`"><img src=x onerror=alert(1)>`) + "&key=x"} {
		_, body, _ := get(t, client(t), srv.URL+u)
		if strings.Contains(body, "<script>") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s: markup from a key reached the page unescaped", u)
		}
	}
	_, body, _ := get(t, client(t), srv.URL+"/")
	if !strings.Contains(body, "&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;") {
		t.Error("the hostile key is not shown, escaped, in the parked list")
	}
}

func TestSearchByKey(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, nil)
	_, body, _ := get(t, client(t), srv.URL+"/?scope=acct-1&key=done-1")
	for _, want := range []string{`id="record-state" class="state succeeded">succeeded<`, `id="record-status">201<`, `{&#34;id&#34;:&#34;ch_1&#34;}`, "fp-done"} {
		if !strings.Contains(body, want) {
			t.Errorf("search result lacks %q", want)
		}
	}
	_, body, _ = get(t, client(t), srv.URL+"/?scope=acct-2&key=done-1")
	if !strings.Contains(body, `id="not-found"`) {
		t.Error("a key in another scope was found")
	}
}

// csrf fetches the page with c and returns the form token in it.
func csrf(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	_, body, _ := get(t, c, base+"/")
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no form token on the page")
	}
	return m[1]
}

func post(t *testing.T, c *http.Client, u string, form url.Values, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func state(t *testing.T, f fixture, scope, key string) idemtype.State {
	t.Helper()
	r, err := f.l.Get(context.Background(), scope, key)
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

func TestReadOnlyRefusesPost(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, nil)
	code, body, _ := post(t, client(t), srv.URL+"/reconcile", url.Values{"scope": {""}, "key": {"parked-1"}, "as": {"release"}})
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("POST on a read-only page: %d %s", code, body)
	}
	if s := state(t, f, "", "parked-1"); s != idemtype.StateParked {
		t.Errorf("record changed to %s", s)
	}
}

func TestReconcileInWriteMode(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, &admin.Options{Write: true})
	c := client(t)
	tok := csrf(t, c, srv.URL)

	form := url.Values{"csrf": {tok}, "scope": {""}, "key": {"parked-1"}, "as": {"succeeded"}, "status": {"201"}, "body": {`{"id":"ch_7"}`}, "confirm": {"yes"}}
	code, _, hdr := post(t, c, srv.URL+"/reconcile", form, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusSeeOther {
		t.Fatalf("reconcile: %d", code)
	}
	_, body, _ := get(t, c, srv.URL+hdr.Get("Location"))
	if !strings.Contains(body, `id="resolved"`) || !strings.Contains(body, `class="state succeeded"`) {
		t.Errorf("after reconcile the page does not show the resolved record")
	}
	r, _ := f.l.Get(context.Background(), "", "parked-1")
	if r.State != idemtype.StateSucceeded || r.Status != 201 || string(r.Body) != `{"id":"ch_7"}` {
		t.Errorf("record: %+v", r)
	}
	if v := f.m.Totals().Reconciliations; v != 1 {
		t.Errorf("reconciliations counted: %d", v)
	}

	// A live lease is refused without force, resolved with it.
	form = url.Values{"csrf": {tok}, "scope": {""}, "key": {"live-1"}, "as": {"release"}, "confirm": {"yes"}}
	code, body, _ = post(t, c, srv.URL+"/reconcile", form)
	if code != http.StatusConflict || !strings.Contains(body, "live lease") {
		t.Errorf("live lease: %d", code)
	}
	form.Set("force", "on")
	if code, _, _ = post(t, c, srv.URL+"/reconcile", form); code != http.StatusSeeOther || state(t, f, "", "live-1") != idemtype.StateReleased {
		t.Errorf("forced: %d, state %s", code, state(t, f, "", "live-1"))
	}
	// A finished record is never changed.
	form = url.Values{"csrf": {tok}, "scope": {"acct-1"}, "key": {"done-1"}, "as": {"release"}, "confirm": {"yes"}}
	if code, body, _ = post(t, c, srv.URL+"/reconcile", form); code != http.StatusConflict || !strings.Contains(body, "not parked or in progress") {
		t.Errorf("finished record: %d", code)
	}
}

func TestReconcileNeedsTheFormTokenAndSameOrigin(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, &admin.Options{Write: true})
	c := client(t)
	tok := csrf(t, c, srv.URL)
	form := url.Values{"scope": {""}, "key": {"parked-1"}, "as": {"release"}, "confirm": {"yes"}}

	if code, _, _ := post(t, c, srv.URL+"/reconcile", form); code != http.StatusForbidden {
		t.Errorf("no token: %d", code)
	}
	form.Set("csrf", tok)
	if code, _, _ := post(t, client(t), srv.URL+"/reconcile", form); code != http.StatusForbidden {
		t.Errorf("token without its cookie (another browser): %d", code)
	}
	if code, _, _ := post(t, c, srv.URL+"/reconcile", form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site: %d", code)
	}
	if code, _, _ := post(t, c, srv.URL+"/reconcile", form, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("foreign origin: %d", code)
	}
	if s := state(t, f, "", "parked-1"); s != idemtype.StateParked {
		t.Fatalf("a refused POST changed the record: %s", s)
	}
}

func TestNonLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	f := seed(t)
	for _, addr := range []string{"0.0.0.0:9090", ":9090", "10.1.2.3:80", "[::]:9090"} {
		if _, err := admin.New(f.l, &admin.Options{Addr: addr}); err == nil {
			t.Errorf("New(%s) without a token: no error", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090"} {
		if _, err := admin.New(f.l, &admin.Options{Addr: addr}); err != nil {
			t.Errorf("New(%s): %v", addr, err)
		}
	}
	if _, err := admin.New(f.l, &admin.Options{Token: "short"}); err == nil {
		t.Error("a 5-byte token was accepted")
	}
	// Handler refuses to serve rather than serving unprotected.
	h := admin.Handler(f.l, &admin.Options{Addr: "0.0.0.0:9090"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "refuses to serve") {
		t.Errorf("Handler with unsafe options: %d %s", rec.Code, rec.Body)
	}

	// Without a token, a request that arrives off loopback, or names a
	// foreign host (DNS rebinding), is refused whatever Addr said.
	h, _ = admin.New(f.l, nil)
	for _, c := range []struct {
		local net.Addr
		host  string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 9090}, "10.0.0.5:9090"},
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 9090}, "evil.example:9090"},
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = c.host
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, c.local))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%v %s: %d", c.local, c.host, rec.Code)
		}
	}
}

func TestTokenGuardsEverythingButHealthz(t *testing.T) {
	t.Parallel()
	f := seed(t)
	const token = "0123456789abcdef0123"
	srv := serve(t, f, &admin.Options{Token: token, Write: true})
	c := client(t)

	if code, _, _ := get(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code, _, hdr := get(t, c, srv.URL+"/", "Accept", "text/html"); code != http.StatusSeeOther || hdr.Get("Location") != "/login" {
		t.Errorf("browser without token: %d → %s", code, hdr.Get("Location"))
	}
	if code, _, _ := get(t, c, srv.URL+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without token: %d", code)
	}
	if code, _, _ := get(t, c, srv.URL+"/", "Authorization", "Bearer wrong-token-wrong-token"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code, body, _ := get(t, c, srv.URL+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body, _ := get(t, c, srv.URL+"/metrics", "Authorization", "Bearer "+token); code != 200 || !strings.Contains(body, `idem_claims_total{driver="sqlite",face="library",outcome="replay"} 1`) {
		t.Errorf("/metrics with token: %d\n%s", code, body)
	}

	// The login form sets a session cookie that is not the token.
	if code, _, hdr := post(t, c, srv.URL+"/login", url.Values{"token": {"nope"}}); code != http.StatusSeeOther || hdr.Get("Location") != "/login?failed" {
		t.Errorf("bad login: %d %s", code, hdr.Get("Location"))
	}
	code, _, hdr := post(t, c, srv.URL+"/login", url.Values{"token": {token}})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/" {
		t.Fatalf("login: %d", code)
	}
	if sc := hdr.Get("Set-Cookie"); strings.Contains(sc, token) || !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Errorf("session cookie %q", sc)
	}
	if code, _, _ := get(t, c, srv.URL+"/"); code != 200 {
		t.Errorf("after login: %d", code)
	}
}

func TestMetricsAndHealthz(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, nil)
	code, body, _ := get(t, client(t), srv.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{`idem_duplicates_prevented_total{driver="sqlite",face="library"} 1`, "go_goroutines", "idem_claim_duration_seconds_bucket"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _, _ := get(t, client(t), srv.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	// No collector, no /metrics, and the chart says why.
	h, _ := admin.New(f.l, &admin.Options{Logger: slog.New(slog.DiscardHandler)})
	bare := httptest.NewServer(h)
	defer bare.Close()
	if code, _, _ := get(t, client(t), bare.URL+"/metrics"); code != 404 {
		t.Errorf("/metrics without a collector: %d", code)
	}
	if _, body, _ := get(t, client(t), bare.URL+"/"); !strings.Contains(body, `id="chart-off"`) || !strings.Contains(body, `id="count-parked">2<`) {
		t.Error("page without a collector")
	}
}

func TestDeadJobsSection(t *testing.T) {
	t.Parallel()
	f := seed(t)
	var gotLimit int
	srv := serve(t, f, &admin.Options{ListLimit: 7, DeadJobs: func(ctx context.Context, limit int) ([]admin.DeadJob, error) {
		gotLimit = limit
		return []admin.DeadJob{{Queue: "email", ID: "42", Key: "welcome-<b>", Attempts: 25, LastError: "smtp: 550 <mailbox> unavailable", DiedAt: time.Now()}}, nil
	}})
	_, body, _ := get(t, client(t), srv.URL+"/")
	if gotLimit != 7 || !strings.Contains(body, "smtp: 550 &lt;mailbox&gt; unavailable") || strings.Contains(body, "jobs-off") {
		t.Errorf("jobs section (limit %d)", gotLimit)
	}
	srv = serve(t, f, &admin.Options{DeadJobs: func(context.Context, int) ([]admin.DeadJob, error) { return nil, errors.New("no jobs table") }})
	if _, body, _ := get(t, client(t), srv.URL+"/"); !strings.Contains(body, "no jobs table") {
		t.Error("jobs error not shown")
	}
}
