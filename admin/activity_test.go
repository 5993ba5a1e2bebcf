package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/syncbuf"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
)

// gateway is one process on a shared database: its ledger, watched by
// its own Reporter.
type gateway struct {
	l   *idem.Ledger
	rep *admin.Reporter
}

// eachDriver runs fn on each driver with a fresh database's URL.
func eachDriver(t *testing.T, fn func(t *testing.T, url string)) {
	for _, name := range ledgertest.Drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
			if name == "postgres" {
				u = pgtest.NewDB(t)
			}
			fn(t, u)
		})
	}
}

// openGateway opens a ledger on url with a started Reporter that flushes
// only when told (Flush), or on Close at cleanup.
func openGateway(t *testing.T, url string) gateway {
	t.Helper()
	rep := admin.NewReporter(&admin.ReporterOptions{Every: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	l, err := dburl.Open(context.Background(), url, &idem.Options{Logger: slog.New(slog.DiscardHandler), Observer: rep.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Start(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rep.Close(); err != nil {
			t.Errorf("reporter close: %v", err)
		}
		l.Close()
	})
	return gateway{l: l, rep: rep}
}

// adminPage serves the admin page of l with o and returns a getter of its
// index.
func adminPage(t *testing.T, l *idem.Ledger, o admin.Options) (*httptest.Server, func(path string) string) {
	t.Helper()
	o.Logger = cmpLogger(o.Logger)
	h, err := admin.New(l, &o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := client(t)
	return srv, func(path string) string {
		t.Helper()
		code, body, _ := get(t, c, srv.URL+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		return body
	}
}

func cmpLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// section returns the HTML of <section id="id">.
func section(t *testing.T, body, id string) string {
	t.Helper()
	i := strings.Index(body, `<section id="`+id+`">`)
	if i < 0 {
		t.Fatalf("no section %s", id)
	}
	s := body[i:]
	return s[:strings.Index(s, "</section>")]
}

func mustClaim(t *testing.T, l *idem.Ledger, op idem.Op, want idem.Outcome) *idem.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), op)
	if err != nil {
		t.Fatalf("claim %s: %v", op.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %s: %v, want %v", op.Key, c.Outcome, want)
	}
	return c
}

// Two gateways on one database: the page built on A shows what B did once
// B has flushed (its replays, mismatch, and the replays per key in the
// recent list), records counted by state, and when each gateway last
// reported. A hostile key is escaped, and hashed under HashKeys.
func TestDatabaseTotalsAcrossGateways(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, u string) {
		ctx := context.Background()
		a, b := openGateway(t, u), openGateway(t, u)
		_, view := adminPage(t, a.l, admin.Options{})

		done := mustClaim(t, b.l, idem.Op{Scope: "acct", Key: hostileKey, Fingerprint: "fp-1"}, idem.Acquired)
		if err := b.l.Complete(ctx, done, idem.Result{Status: 201}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			mustClaim(t, b.l, idem.Op{Scope: "acct", Key: hostileKey, Fingerprint: "fp-1"}, idem.Replay)
		}
		mustClaim(t, b.l, idem.Op{Scope: "acct", Key: hostileKey, Fingerprint: "fp-2"}, idem.Mismatch)
		rel := mustClaim(t, a.l, idem.Op{Scope: "acct", Key: "released-1"}, idem.Acquired)
		if err := a.l.Release(ctx, rel); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, a.l, idem.Op{Scope: "acct", Key: "live-1", Lease: time.Hour}, idem.Acquired)

		// Nothing reported yet: no database totals, and the page says so.
		body := view("/")
		if strings.Contains(body, `id="db-totals"`) || !strings.Contains(body, "no gateway reports to the database yet") && !strings.Contains(body, "counted live in the database") {
			t.Fatalf("before any report:\n%s", section(t, body, "totals"))
		}
		if err := b.rep.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		body = view("/")
		for _, want := range []string{
			`id="total-duplicates">3<`, `id="total-replays">3<`, `id="total-mismatches">1<`, `id="total-reclaims">0<`,
			`id="count-completed">1<`, `id="count-released">1<`, `id="count-in-progress">1<`, `id="count-total">3<`,
			"from the database, for all gateways", b.rep.Source(),
		} {
			if !strings.Contains(section(t, body, "totals"), want) {
				t.Errorf("totals lack %q", want)
			}
		}
		if strings.Contains(body, a.rep.Source()) {
			t.Error("A has not reported, yet is listed")
		}
		recent := section(t, body, "recent")
		if strings.Contains(recent, "<script>") || !strings.Contains(recent, "&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;") {
			t.Errorf("recent list: the hostile key must show, escaped:\n%s", recent)
		}
		rows := regexp.MustCompile(`(?s)<tr class="recent-row">.*?</tr>`).FindAllString(recent, -1)
		if len(rows) != 3 || !strings.Contains(rows[0], "live-1") || !strings.Contains(rows[1], "released-1") {
			t.Fatalf("recent rows (newest first: live-1, released-1, the hostile key):\n%s", strings.Join(rows, "\n"))
		}
		if !strings.Contains(rows[2], `<td class="replays" title="last `) || !strings.Contains(rows[2], `>3</td>`) || !strings.Contains(rows[2], "<td>201</td>") {
			t.Errorf("the replayed key's row lacks 3 replays or status 201:\n%s", rows[2])
		}

		// More replays, then both report: the totals add up the two.
		mustClaim(t, a.l, idem.Op{Scope: "acct", Key: hostileKey, Fingerprint: "fp-1"}, idem.Replay)
		if err := a.rep.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.rep.Flush(ctx); err != nil { // nothing new: counters stay, replays are not added twice
			t.Fatal(err)
		}
		body = view("/")
		if !strings.Contains(body, `id="total-replays">4<`) || !strings.Contains(body, a.rep.Source()) || !strings.Contains(body, "Reporting processes: 2") {
			t.Errorf("after both reported:\n%s", section(t, body, "totals"))
		}
		if rows := regexp.MustCompile(`(?s)<tr class="recent-row">.*?</tr>`).FindAllString(section(t, body, "recent"), -1); len(rows) != 3 || !strings.Contains(rows[2], ">4</td>") {
			t.Errorf("the replayed key's row after A's replay:\n%s", strings.Join(rows, "\n"))
		}

		// --hash-keys: the recent list shows the hash, never the key.
		_, hashed := adminPage(t, a.l, admin.Options{HashKeys: true})
		recent = section(t, hashed("/"), "recent")
		if strings.Contains(recent, "script") || !strings.Contains(recent, idem.KeyHash(hostileKey)) || !strings.Contains(recent, idem.KeyHash("live-1")) {
			t.Errorf("hashed recent list:\n%s", recent)
		}
	})
}

// The replays held between flushes are bounded: past MaxKeys a key's
// replays count only in the totals.
func TestReporterBoundsItsKeys(t *testing.T) {
	t.Parallel()
	u := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	rep := admin.NewReporter(&admin.ReporterOptions{Every: time.Hour, MaxKeys: 1})
	l, err := dburl.Open(context.Background(), u, &idem.Options{Logger: slog.New(slog.DiscardHandler), Observer: rep.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := rep.Flush(context.Background()); err == nil {
		t.Error("Flush before Start succeeded")
	}
	if err := rep.Start(l); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2"} {
		c := mustClaim(t, l, idem.Op{Key: k}, idem.Acquired)
		if err := l.Complete(context.Background(), c, idem.Result{}); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, l, idem.Op{Key: k}, idem.Replay)
	}
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rep.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, view := adminPage(t, l, admin.Options{})
	body := view("/")
	rows := regexp.MustCompile(`(?s)<tr class="recent-row">.*?</tr>`).FindAllString(section(t, body, "recent"), -1)
	if !strings.Contains(body, `id="total-replays">2<`) || len(rows) != 2 || !strings.Contains(rows[0], ">0</td>") || !strings.Contains(rows[1], ">1</td>") {
		t.Errorf("want 2 replays in the totals, 1 on k1 and none on k2 (over the bound):\n%s", strings.Join(rows, "\n"))
	}
}

// The queues section shows how long the oldest due job has waited, and
// with Write, pause and resume buttons, which are refused without Write
// and without the form token. Each action is logged.
func TestQueueAgeAndPauseButtons(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, u string) {
		ctx := context.Background()
		g := openGateway(t, u)
		c, err := jobs.New(g.l, &jobs.Config{Logger: slog.New(slog.DiscardHandler), Queues: map[string]jobs.QueueConfig{"email": {}, "later": {}}})
		if err != nil {
			t.Fatal(err)
		}
		job := jobs.Raw{Name: "noop", Data: []byte(`{}`)}
		if _, err := c.Enqueue(ctx, job, &jobs.EnqueueOpts{Queue: "email", RunAt: time.Now().Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, job, &jobs.EnqueueOpts{Queue: "email", RunAt: time.Now().Add(time.Hour)}); err != nil { // not due: not waiting
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, job, &jobs.EnqueueOpts{Queue: "later", RunAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		o := admin.Options{JobQueues: admin.LedgerJobQueues(g.l), PauseQueue: admin.LedgerPauseQueue(g.l), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		ro, view := adminPage(t, g.l, o)
		q := section(t, view("/"), "queues")
		if !regexp.MustCompile(`<tr class="queue"><td>email</td><td>running</td><td>2</td><td class="age">2h0m\d+s</td>`).MatchString(q) ||
			!strings.Contains(q, `<tr class="queue"><td>later</td><td>running</td><td>1</td><td class="age">-</td>`) {
			t.Errorf("queues section (email's oldest due job waited 2h, later's none):\n%s", q)
		}
		if strings.Contains(q, "Pause") {
			t.Error("a read-only page offers pause buttons")
		}
		if code, _, _ := post(t, client(t), ro.URL+"/queues", url.Values{"queue": {"email"}, "action": {"pause"}}); code != http.StatusForbidden {
			t.Errorf("pause on a read-only page: %d", code)
		}

		o.Write = true
		rw, view := adminPage(t, g.l, o)
		cl := client(t)
		tok := csrf(t, cl, rw.URL)
		if !strings.Contains(section(t, view("/"), "queues"), `value="pause" class="pause">Pause</button>`) {
			t.Error("no pause button in write mode")
		}
		if code, _, _ := post(t, cl, rw.URL+"/queues", url.Values{"queue": {"email"}, "action": {"pause"}}); code != http.StatusForbidden {
			t.Errorf("pause without the form token: %d", code)
		}
		if code, _, _ := post(t, client(t), rw.URL+"/queues", url.Values{"csrf": {tok}, "queue": {"email"}, "action": {"pause"}}); code != http.StatusForbidden {
			t.Errorf("pause with a token but another browser's cookie: %d", code)
		}
		if qs, _ := c.Queues(ctx); qs[0].Paused {
			t.Fatal("a refused pause paused the queue")
		}
		if code, _, _ := post(t, cl, rw.URL+"/queues", url.Values{"csrf": {tok}, "queue": {"email"}, "action": {"pause"}}); code != http.StatusSeeOther {
			t.Fatalf("pause: %d", code)
		}
		if qs, _ := c.Queues(ctx); !qs[0].Paused {
			t.Fatal("pause did not pause")
		}
		if !strings.Contains(section(t, view("/"), "queues"), `value="resume" class="resume">Resume</button>`) {
			t.Error("a paused queue offers no resume button")
		}
		if code, _, _ := post(t, cl, rw.URL+"/queues", url.Values{"csrf": {tok}, "queue": {"email"}, "action": {"resume"}}); code != http.StatusSeeOther {
			t.Fatalf("resume: %d", code)
		}
		if qs, _ := c.Queues(ctx); qs[0].Paused {
			t.Fatal("resume did not resume")
		}
		if n := strings.Count(logs.String(), "a job queue from the admin page"); n != 2 || !strings.Contains(logs.String(), "operator paused") || !strings.Contains(logs.String(), "operator resumed") {
			t.Errorf("want one log line per action:\n%s", logs.String())
		}
	})
}

// The plain page refreshes itself without a script, by default every 30
// s when read-only and never in write mode; ?refresh= chooses. A search
// result is not refreshed.
func TestMetaRefresh(t *testing.T) {
	t.Parallel()
	f := seed(t)
	meta := regexp.MustCompile(`<meta http-equiv="refresh" content="(\d+); url=/\?refresh=(\d+)">`)
	check := func(srv *httptest.Server, path, want string) {
		t.Helper()
		_, body, hdr := get(t, client(t), srv.URL+path)
		m := meta.FindStringSubmatch(body)
		got := ""
		if m != nil {
			got = m[1]
			if m[2] != m[1] {
				t.Errorf("%s: refresh %s reloads as %s", path, m[1], m[2])
			}
		}
		if got != want {
			t.Errorf("%s: refresh %q, want %q", path, got, want)
		}
		if !strings.Contains(hdr.Get("Content-Security-Policy"), "default-src 'none'") || strings.Contains(body, "<script") {
			t.Errorf("%s: a script or a looser policy", path)
		}
	}
	ro := serve(t, f, nil)
	check(ro, "/", "30")
	check(ro, "/?refresh=5", "5")
	check(ro, "/?refresh=off", "")
	check(ro, "/?refresh=7", "30") // not a choice: the default
	check(ro, "/?scope=acct-1&key=done-1&refresh=5", "")
	_, body, _ := get(t, client(t), ro.URL+"/?refresh=5")
	if !strings.Contains(body, `<b id="refresh-current">5 s</b>`) || !strings.Contains(body, `href="/?refresh=off" id="refresh-off"`) || !strings.Contains(body, `href="/?refresh=30" id="refresh-30"`) {
		t.Error("the refresh choices are not offered as links")
	}
	rw := serve(t, f, &admin.Options{Write: true})
	check(rw, "/", "")
	check(rw, "/?refresh=5", "5")
	// A confirm form is not refreshed.
	c := client(t)
	tok := csrf(t, c, rw.URL)
	_, body, _ = post(t, c, rw.URL+"/reconcile", url.Values{"csrf": {tok}, "scope": {""}, "key": {"parked-1"}, "as": {"release"}})
	if !strings.Contains(body, `id="confirm"`) || meta.MatchString(body) {
		t.Error("the confirm page is missing or refreshes")
	}
}
