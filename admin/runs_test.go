package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/internal/syncbuf"
)

// errDown is the payment provider failing during the charge.
var errDown = errors.New("provider down")

// rideRun books a ride in two steps: a local row, then a charge without a
// lookup, which calls charge.
func rideRun(charge func() (string, error)) idem.RunFunc {
	return func(r *idem.Run) (idem.Result, error) {
		if _, err := idem.TxStep(r, "create-ride", func(context.Context, *sql.Tx) (string, error) { return "ride", nil }); err != nil {
			return idem.Result{}, err
		}
		ch, err := idem.CallStep(r, "charge", func(context.Context, string) (string, error) { return charge() })
		return idem.Result{Status: 201, Body: []byte(ch)}, err
	}
}

// seedRuns leaves two runs stopped between steps in l: "" / ride-parked,
// parked on its started charge, and acct-1 / <hostile key>, a registered
// run whose charge failed (in progress, lease ended).
func seedRuns(t *testing.T, l *idem.Ledger) {
	t.Helper()
	ctx := context.Background()
	down := func() (string, error) { return "", errDown }
	op := idem.Op{Key: "ride-parked", Fingerprint: "fp"}
	if _, err := l.Run(ctx, op, rideRun(down)); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	if _, err := l.Run(ctx, op, rideRun(down)); !errors.Is(err, idem.ErrParked) {
		t.Fatalf("%v, want parked", err)
	}
	book := idem.AddRun(idem.NewRuns(), "book-ride/v1", func(r *idem.Run, in string) (idem.Result, error) { return rideRun(down)(r) })
	if _, err := book.Run(ctx, l, idem.Op{Scope: "acct-1", Key: hostileKey, Fingerprint: "fp"}, "in"); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
}

func serveLedger(t *testing.T, l *idem.Ledger, o admin.Options) *httptest.Server {
	t.Helper()
	h, err := admin.New(l, &o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// TestRunsSection: the runs section lists runs stopped between steps with
// their steps, escaped; read-only it has no forms and refuses the POST;
// the list is bounded by ListLimit.
func TestRunsSection(t *testing.T) {
	t.Parallel()
	ledgertest.EachDriver(t, func(t *testing.T, l *idem.Ledger) {
		seedRuns(t, l)
		srv := serveLedger(t, l, admin.Options{Logger: slog.New(slog.DiscardHandler)})
		code, body, _ := get(t, client(t), srv.URL+"/")
		runs := body[strings.Index(body, `<section id="runs">`):]
		runs = runs[:strings.Index(runs, "</section>")]
		for _, want := range []string{"ride-parked", "&lt;script&gt;", "book-ride/v1", `<td class="step-state">started</td>`,
			`<td class="step-state">done</td>`, idem.StepKey("", "ride-parked", "charge"), "outcome unknown"} {
			if !strings.Contains(runs, want) {
				t.Errorf("runs section lacks %q:\n%s", want, runs)
			}
		}
		if code != http.StatusOK || strings.Contains(body, hostileKey) || strings.Contains(runs, "/reconcile-step") {
			t.Errorf("read-only page: %d; raw hostile key or a step form shown", code)
		}
		form := url.Values{"scope": {""}, "key": {"ride-parked"}, "step": {"charge"}, "as": {"not-done"}, "confirm": {"yes"}}
		if code, body, _ := post(t, client(t), srv.URL+"/reconcile-step", form); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST on a read-only page: %d %s", code, body)
		}
		if s := state(t, fixture{l: l}, "", "ride-parked"); s != idemtype.StateParked {
			t.Errorf("record changed to %s", s)
		}

		srv = serveLedger(t, l, admin.Options{ListLimit: 1, Logger: slog.New(slog.DiscardHandler)})
		_, body, _ = get(t, client(t), srv.URL+"/")
		if n := strings.Count(body, `<div class="run">`); n != 1 || !strings.Contains(body, "Showing the first 1") {
			t.Errorf("ListLimit 1: %d runs shown", n)
		}
	})
}

// TestRunsResolveStep: in write mode a parked step is resolved through a
// review page, with the form token and same origin required, refusals for
// a step whose outcome is known and a result that is not JSON, one log
// line (key hashed under HashKeys), and a run that then resumes with the
// operator's result without calling the step.
func TestRunsResolveStep(t *testing.T) {
	t.Parallel()
	ledgertest.EachDriver(t, func(t *testing.T, l *idem.Ledger) {
		seedRuns(t, l)
		var logs syncbuf.Buffer
		srv := serveLedger(t, l, admin.Options{Write: true, HashKeys: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		c := client(t)
		tok := csrf(t, c, srv.URL)
		form := url.Values{"scope": {""}, "key": {"ride-parked"}, "step": {"charge"}, "as": {"done"}, "result": {`"ch_admin"`}, "confirm": {"yes"}}
		if code, _, _ := post(t, c, srv.URL+"/reconcile-step", form); code != http.StatusForbidden {
			t.Errorf("no form token: %d", code)
		}
		form.Set("csrf", tok)
		if code, _, _ := post(t, client(t), srv.URL+"/reconcile-step", form); code != http.StatusForbidden {
			t.Errorf("form token without its cookie: %d", code)
		}
		if code, _, _ := post(t, c, srv.URL+"/reconcile-step", form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
			t.Errorf("cross-site: %d", code)
		}
		for _, tc := range []struct {
			set  url.Values
			code int
			want string
		}{
			{url.Values{"step": {"create-ride"}}, http.StatusConflict, "not started"},
			{url.Values{"step": {"nope"}}, http.StatusNotFound, "no step nope"},
			{url.Values{"result": {`{"id":`}}, http.StatusBadRequest, "not JSON"},
			{url.Values{"as": {"not-done"}}, http.StatusBadRequest, "stores no result"},
			{url.Values{"as": {"maybe"}}, http.StatusBadRequest, "choose done or not done"},
		} {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			for k, v := range tc.set {
				f[k] = v
			}
			code, body, _ := post(t, c, srv.URL+"/reconcile-step", f)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%v: %d, want %d with %q", tc.set, code, tc.code, tc.want)
			}
		}
		if s := state(t, fixture{l: l}, "", "ride-parked"); s != idemtype.StateParked {
			t.Fatalf("a refused POST changed the record: %s", s)
		}

		// Review first: nothing is written.
		form.Del("confirm")
		code, body, _ := post(t, c, srv.URL+"/reconcile-step", form, "Sec-Fetch-Site", "same-origin")
		if code != http.StatusOK || !strings.Contains(body, `id="step-confirm"`) || !strings.Contains(body, "&#34;ch_admin&#34;") {
			t.Fatalf("review: %d\n%s", code, body)
		}
		if s := state(t, fixture{l: l}, "", "ride-parked"); s != idemtype.StateParked {
			t.Fatalf("the review changed the record: %s", s)
		}
		form.Set("confirm", "yes")
		code, _, hdr := post(t, c, srv.URL+"/reconcile-step", form, "Sec-Fetch-Site", "same-origin")
		if code != http.StatusSeeOther {
			t.Fatalf("resolve: %d", code)
		}
		if _, body, _ := get(t, c, srv.URL+hdr.Get("Location")); !strings.Contains(body, `id="resolved"`) || !strings.Contains(body, `class="state in_progress"`) {
			t.Errorf("after resolve the page does not show the handed-back record")
		}
		if n := strings.Count(logs.String(), "operator resolved a step from the admin page"); n != 1 ||
			!strings.Contains(logs.String(), idem.KeyHash("ride-parked")) || strings.Contains(logs.String(), "key=ride-parked") {
			t.Errorf("want one log line with the key hashed:\n%s", logs.String())
		}
		calls := 0
		res, err := l.Run(context.Background(), idem.Op{Key: "ride-parked", Fingerprint: "fp"}, rideRun(func() (string, error) { calls++; return "ch_called", nil }))
		if err != nil || string(res.Body) != "ch_admin" || calls != 0 {
			t.Fatalf("resumed run: %q, %v, %d calls; want the operator's result, no call", res.Body, err, calls)
		}
		// The step of the stale registered run: not done, then the run is
		// still listed (its next attempt has not come yet).
		form = url.Values{"csrf": {tok}, "scope": {"acct-1"}, "key": {hostileKey}, "step": {"charge"}, "as": {"not-done"}, "confirm": {"yes"}}
		if code, _, _ := post(t, c, srv.URL+"/reconcile-step", form); code != http.StatusSeeOther {
			t.Fatalf("not done: %d", code)
		}
		steps, _ := l.RunSteps(context.Background(), "acct-1", hostileKey)
		if len(steps) != 2 || steps[1].Name != "create-ride" {
			t.Errorf("steps after not done: %+v", steps)
		}
	})
}
