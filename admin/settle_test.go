package admin_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
)

// httpRecord leaves a claim made by idemhttp whose outcome is unknown
// (the handler said so), and returns the handler chain to replay it.
func httpRecord(t *testing.T, f fixture, key string) http.Handler {
	t.Helper()
	h := idemhttp.Middleware(f.l, &idemhttp.Options{Logger: slog.New(slog.DiscardHandler), AnonymousScope: idemhttp.AnonymousShared})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Unknown(r.Context())
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, chargeRequest(key))
	r, err := f.l.Get(context.Background(), "", key)
	if err != nil || r.State != idemtype.StateInProgress || !admin.IsHTTPRecord(r) {
		t.Fatalf("setup: %+v %v (answer %d)", r, err, rec.Code)
	}
	return h
}

func chargeRequest(key string) *http.Request {
	req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	return req
}

func TestSettlementRules(t *testing.T) {
	t.Parallel()
	httpRec := idemtype.Record{Fingerprint: idemhttp.FingerprintScheme + ":abc", State: idemtype.StateParked}
	other := idemtype.Record{Fingerprint: "jcs-sha256:abc", State: idemtype.StateParked}
	ct := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name string
		rec  idemtype.Record
		s    admin.Settlement
		want string // "" for accepted
	}{
		{"http without status", httpRec, admin.Settlement{As: idemtype.StateSucceeded}, "a status is required"},
		{"http status 0 with body", httpRec, admin.Settlement{As: idemtype.StateSucceeded, Body: []byte("{}"), Header: ct}, "a status is required"},
		{"http status 1000", httpRec, admin.Settlement{As: idemtype.StateFailed, Status: 1000}, "want an HTTP status"},
		{"http body without content type", httpRec, admin.Settlement{As: idemtype.StateSucceeded, Status: 201, Body: []byte("{}")}, "Content-Type"},
		{"http set-cookie", httpRec, admin.Settlement{As: idemtype.StateSucceeded, Status: 201, Header: http.Header{"set-cookie": {"a=b"}}}, "cannot be stored"},
		{"http line break", httpRec, admin.Settlement{As: idemtype.StateSucceeded, Status: 201, Header: http.Header{"Location": {"/a\r\nX: y"}}}, "line break"},
		{"http ok", httpRec, admin.Settlement{As: idemtype.StateSucceeded, Status: 201, Header: ct, Body: []byte("{}")}, ""},
		{"http no body", httpRec, admin.Settlement{As: idemtype.StateFailed, Status: 409}, ""},
		{"release with status", httpRec, admin.Settlement{As: idemtype.StateReleased, Status: 201}, "stores no result"},
		{"release", httpRec, admin.Settlement{As: idemtype.StateReleased}, ""},
		{"other with headers", other, admin.Settlement{As: idemtype.StateSucceeded, Header: ct}, "only for records made by the HTTP layer"},
		{"other without status", other, admin.Settlement{As: idemtype.StateSucceeded, Body: []byte("x")}, ""},
	} {
		res, err := tc.s.Resolution(tc.rec)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		case tc.want == "" && res.As != tc.s.As:
			t.Errorf("%s: resolution %+v", tc.name, res)
		}
	}
}

// TestSettlementReplaysThroughMiddleware: a result an operator stores for
// a record made by idemhttp replays like the upstream's answer would:
// status, Content-Type and body (issue 10 item 11).
func TestSettlementReplaysThroughMiddleware(t *testing.T) {
	t.Parallel()
	f := seed(t)
	h := httpRecord(t, f, "charge-7")
	r, _ := f.l.Get(context.Background(), "", "charge-7")
	res, err := admin.Settlement{As: idemtype.StateSucceeded, Status: 201, Header: http.Header{"content-type": {"application/json"}}, Body: []byte(`{"id":"ch_7"}`), Force: true}.Resolution(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Resolve(context.Background(), "", "charge-7", res); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, chargeRequest("charge-7"))
	if rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"id":"ch_7"}` || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
}

// TestReconcileShowsBeforeStoring: the page's form first shows what would
// be stored and writes nothing; the confirm button stores it. For a record
// made by the HTTP layer a status is required.
func TestReconcileShowsBeforeStoring(t *testing.T) {
	t.Parallel()
	f := seed(t)
	httpRecord(t, f, "charge-8")
	srv := serve(t, f, &admin.Options{Write: true})
	c := client(t)
	tok := csrf(t, c, srv.URL)

	form := url.Values{"csrf": {tok}, "scope": {""}, "key": {"charge-8"}, "as": {"succeeded"}, "body": {`{"id":"ch_8"}`}, "content_type": {"application/json"}, "force": {"on"}}
	code, body, _ := post(t, c, srv.URL+"/reconcile", form)
	if code != http.StatusBadRequest || !strings.Contains(body, "a status is required") {
		t.Errorf("HTTP record without a status: %d, page lacks the reason", code)
	}
	form.Set("status", "201")
	code, body, _ = post(t, c, srv.URL+"/reconcile", form)
	if code != http.StatusOK || !strings.Contains(body, `id="confirm"`) || !strings.Contains(body, `<dd id="confirm-status">201</dd>`) ||
		!strings.Contains(body, "application/json") || !strings.Contains(body, `{&#34;id&#34;:&#34;ch_8&#34;}`) || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Errorf("review: %d, page does not show what will be stored:\n%s", code, body)
	}
	if s := state(t, f, "", "charge-8"); s != idemtype.StateInProgress {
		t.Fatalf("the review step wrote: %s", s)
	}
	form.Set("confirm", "yes")
	if code, _, _ = post(t, c, srv.URL+"/reconcile", form); code != http.StatusSeeOther {
		t.Fatalf("confirm: %d", code)
	}
	r, _ := f.l.Get(context.Background(), "", "charge-8")
	if r.State != idemtype.StateSucceeded || r.Status != 201 || !strings.Contains(string(r.Meta), "application/json") {
		t.Errorf("stored: %s %d meta %s", r.State, r.Status, r.Meta)
	}
	// The form preselects nothing.
	_, page, _ := get(t, c, srv.URL+"/")
	if !strings.Contains(page, `<option value="" selected disabled>`) {
		t.Error("the reconcile form preselects a decision")
	}
}

// TestReconcileLogHonoursHashKeys: with HashKeys the page logs the key's
// hash, never the key (issue 10 item 10).
func TestReconcileLogHonoursHashKeys(t *testing.T) {
	t.Parallel()
	f := seed(t)
	var logs bytes.Buffer
	h, err := admin.New(f.l, &admin.Options{Write: true, HashKeys: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := client(t)
	tok := csrf(t, c, srv.URL)
	form := url.Values{"csrf": {tok}, "scope": {""}, "key": {"parked-1"}, "as": {"release"}, "confirm": {"yes"}}
	if code, _, _ := post(t, c, srv.URL+"/reconcile", form); code != http.StatusSeeOther {
		t.Fatalf("reconcile: %d", code)
	}
	out, _ := io.ReadAll(&logs)
	if !strings.Contains(string(out), "operator resolved") || strings.Contains(string(out), "key=parked-1") || !strings.Contains(string(out), idem.KeyHash("parked-1")) {
		t.Errorf("log with HashKeys:\n%s", out)
	}
}
