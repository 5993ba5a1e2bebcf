package admin_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/browsertest"
	"github.com/idemdev/idem/jobs"
)

// screenshot saves the page to $IDEM_ADMIN_SCREENSHOT_DIR, when set, for a
// human to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("IDEM_ADMIN_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	os.WriteFile(dir+"/"+name+".png", png, 0o644)
}

func TestBrowserShowsThePageAndReconciles(t *testing.T) {
	ctx := browsertest.Browser(t)
	f := seed(t)
	srv := serve(t, f, &admin.Options{Write: true})

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("totals"))); err != nil {
		t.Fatal(err)
	}
	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("#%s: %v", id, err)
		}
		return strings.TrimSpace(v)
	}
	parked, stale, dups, mismatches, parkedList := text("count-parked"), text("count-stale"), text("total-duplicates"), text("total-mismatches"), text("parked")
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart polyline").length`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "admin-before")
	if parked != "2" || stale != "1" || dups != "1" || mismatches != "1" {
		t.Errorf("numbers: parked %q stale %q duplicates %q mismatches %q", parked, stale, dups, mismatches)
	}
	if !strings.Contains(parkedList, "parked-1") || !strings.Contains(parkedList, hostileKey) {
		t.Errorf("parked list (the hostile key must show as text):\n%s", parkedList)
	}
	if lines != 3 {
		t.Errorf("chart has %d lines, want 3", lines)
	}

	// Resolve parked-1 as succeeded through its row's form.
	row := `//tr[contains(@class,"record-row")][.//code[text()="parked-1"]]`
	err = chromedp.Do(ctx,
		chromedp.Click(row+`//summary`),
		chromedp.WaitVisible(row+`//select[@name="as"]`),
		chromedp.SetValue(row+`//select[@name="as"]`, "succeeded"),
		chromedp.SendKeys(row+`//input[@name="status"]`, "201"),
		chromedp.SendKeys(row+`//textarea[@name="body"]`, `{"id":"ch_browser"}`),
		chromedp.Click(row+`//button[@type="submit"]`),
		chromedp.WaitVisible(chromedp.ID("confirm")), // shown before it is stored
	)
	if err != nil {
		t.Fatal(err)
	}
	if st := text("confirm-status"); st != "201" || state(t, f, "", "parked-1") != idemtype.StateParked {
		t.Errorf("confirm step: status %q, record %s (want it still parked)", st, state(t, f, "", "parked-1"))
	}
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("confirm-store")),
		chromedp.WaitVisible(chromedp.ID("resolved")),
	)
	if err != nil {
		t.Fatal(err)
	}
	state, status, body := text("record-state"), text("record-status"), text("record-body")
	screenshot(t, ctx, "admin-after")
	if state != "succeeded" || status != "201" || body != `{"id":"ch_browser"}` {
		t.Errorf("page after reconcile: state %q status %q body %q", state, status, body)
	}
	r, err := f.l.Get(context.Background(), "", "parked-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != idemtype.StateSucceeded || r.Status != 201 || string(r.Body) != `{"id":"ch_browser"}` {
		t.Errorf("record after reconcile: %s %d %q", r.State, r.Status, r.Body)
	}

	left := text("count-parked")
	if left != "1" {
		t.Errorf("parked after reconcile: %q, want 1", left)
	}
}

func TestBrowserLogsInWithTheToken(t *testing.T) {
	ctx := browsertest.Browser(t)
	f := seed(t)
	const token = "browser-token-0123456789"
	srv := serve(t, f, &admin.Options{Token: token})

	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")), // redirected to /login
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token"),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("login-error")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("totals")),
	)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	parked, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("count-parked")))
	if err != nil {
		t.Fatal(err)
	}
	// HttpOnly: the session cookie is invisible to scripts.
	failed, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.cookie.includes("idem_admin")`))
	if err != nil {
		t.Fatal(err)
	}
	if loc != srv.URL+"/" || parked != "2" {
		t.Errorf("after login: at %s, parked %q", loc, parked)
	}
	if failed {
		t.Error("the session cookie is readable from JavaScript")
	}
}

// TestBrowserResolvesAParkedStep: the runs section shows a parked run's
// steps; its started step is resolved through its form and the review.
func TestBrowserResolvesAParkedStep(t *testing.T) {
	ctx := browsertest.Browser(t)
	f := seed(t)
	seedRuns(t, f.l)
	srv := serve(t, f, &admin.Options{Write: true})

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("runs"))); err != nil {
		t.Fatal(err)
	}
	runs, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("runs")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ride-parked", hostileKey, "book-ride/v1", "started", idem.StepKey("", "ride-parked", "charge")} {
		if !strings.Contains(runs, want) {
			t.Errorf("runs section lacks %q:\n%s", want, runs)
		}
	}
	run := `//div[@class="run"][.//code[text()="ride-parked"]]//tr[contains(@class,"step-row")][.//code[text()="charge"]]`
	err = chromedp.Do(ctx,
		chromedp.Click(run+`//summary`),
		chromedp.WaitVisible(run+`//select[@name="as"]`),
		chromedp.SetValue(run+`//select[@name="as"]`, "done"),
		chromedp.SendKeys(run+`//textarea[@name="result"]`, `"ch_browser"`),
		chromedp.Click(run+`//button[@type="submit"]`),
		chromedp.WaitVisible(chromedp.ID("step-confirm")), // shown before anything is done
	)
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "admin-step-confirm")
	if s := state(t, f, "", "ride-parked"); s != idemtype.StateParked {
		t.Errorf("the review changed the record: %s", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("step-confirm-store")), chromedp.WaitVisible(chromedp.ID("resolved"))); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("record-state")))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := f.l.RunSteps(context.Background(), "", "ride-parked")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(state) != "in_progress" || len(steps) != 2 || steps[1].State != idemtype.StepDone || string(steps[1].Result) != `"ch_browser"` {
		t.Errorf("after resolve: page state %q, steps %+v", state, steps)
	}
}

// The browser sees the database totals a second gateway reported, the
// recent list, the queue's age and a working pause button, and the page
// refreshes itself through a meta tag (no script) that the refresh links
// turn off.
func TestBrowserShowsDatabaseTotalsQueuesAndRefresh(t *testing.T) {
	ctx := browsertest.Browser(t)
	bg := context.Background()
	u := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	a, b := openGateway(t, u), openGateway(t, u)
	done := mustClaim(t, b.l, idem.Op{Key: hostileKey}, idem.Acquired)
	if err := b.l.Complete(bg, done, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, b.l, idem.Op{Key: hostileKey}, idem.Replay)
	mustClaim(t, b.l, idem.Op{Key: hostileKey}, idem.Replay)
	if err := b.rep.Flush(bg); err != nil {
		t.Fatal(err)
	}
	c, err := jobs.New(a.l, &jobs.Config{Logger: slog.New(slog.DiscardHandler), Queues: map[string]jobs.QueueConfig{"email": {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(bg, jobs.Raw{Name: "noop", Data: []byte(`{}`)}, &jobs.EnqueueOpts{Queue: "email", RunAt: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv, _ := adminPage(t, a.l, admin.Options{Write: true, JobQueues: admin.LedgerJobQueues(a.l), PauseQueue: admin.LedgerPauseQueue(a.l)})

	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(v)
	}
	metaRefresh := func() string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('meta[http-equiv="refresh"]') || {content: ""}).content`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?refresh=30"), chromedp.WaitVisible(chromedp.ID("db-totals"))); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "admin-totals")
	if d, r, rows := text("#total-duplicates"), text("#total-replays"), text("#recent-list tbody"); d != "2" || r != "2" || !strings.Contains(rows, hostileKey) {
		t.Errorf("duplicates %q replays %q; recent list (the hostile key as text):\n%s", d, r, rows)
	}
	if replays := text("#recent-list .replays"); replays != "2" {
		t.Errorf("replays of the key: %q, want 2", replays)
	}
	if age := text("#queues .age"); !strings.HasPrefix(age, "1h") {
		t.Errorf("oldest waiting job: %q, want about 1h", age)
	}
	if m := metaRefresh(); m != "30; url=/?refresh=30" {
		t.Errorf("meta refresh %q", m)
	}
	err = chromedp.Do(ctx, chromedp.Click(chromedp.ID("refresh-off")), chromedp.WaitVisible(`//b[@id="refresh-current"][text()="off"]`))
	if err != nil {
		t.Fatal(err)
	}
	if m := metaRefresh(); m != "" {
		t.Errorf("refresh off, yet meta refresh %q", m)
	}
	err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#queues button.pause`)), chromedp.WaitVisible(chromedp.CSS(`#queues button.resume`)))
	if err != nil {
		t.Fatal(err)
	}
	if qs, err := c.Queues(bg); err != nil || len(qs) != 1 || !qs[0].Paused {
		t.Errorf("after the pause button: %+v %v", qs, err)
	}
}
