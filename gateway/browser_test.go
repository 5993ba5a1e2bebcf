package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/internal/browsertest"
)

// A page on another origin submits one charge twice with one key, as a
// double click does, through the gateway to an API that answers CORS. The
// second fetch must read the replay (the first answer's CORS fields are
// stored with it, and Idempotent-Replayed is exposed to the page); before,
// the browser refused the page the replay, and the fetch failed as if the
// network had. One effect.
func TestBrowserReadsAReplayAcrossOrigins(t *testing.T) {
	t.Parallel()
	ctx := browsertest.Browser(t)
	page := serveQuiet(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { checkoutPage(w) }))
	var effects atomic.Int64
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		if allowPage(w, r, page.URL) {
			return
		}
		n := effects.Add(1)
		w.Header().Set("Access-Control-Expose-Headers", "Request-Id")
		w.Header().Set("Request-Id", fmt.Sprint("req_", n))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}
	gw := newGateway(t, openLedger(t, "sqlite"), serveQuiet(t, up).URL, nil)

	script := fmt.Sprintf(`(async () => {
		const out = [];
		for (let i = 0; i < 2; i++) {
			try {
				const r = await fetch(%q, {method: "POST", body: '{"amount":1000}', headers: {
					"Authorization": "Bearer browser", "Content-Type": "application/json", "Idempotency-Key": "double-click"}});
				out.push({status: r.status, replayed: r.headers.get("Idempotent-Replayed"), requestId: r.headers.get("Request-Id"), body: await r.text()});
			} catch (e) {
				out.push({error: String(e)});
			}
		}
		return JSON.stringify(out);
	})()`, gw+"/charges")
	if err := chromedp.Do(ctx, chromedp.Navigate(page.URL)); err != nil {
		t.Fatal(err)
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Status    int
		Replayed  *string
		RequestID *string
		Body      string
		Error     string
	}
	if err := json.Unmarshal([]byte(res), &got); err != nil || len(got) != 2 {
		t.Fatalf("the page's fetches: %s (%v)", res, err)
	}
	first, second := got[0], got[1]
	if first.Error != "" || first.Status != http.StatusCreated || first.Body != `{"charge":1}` || first.Replayed != nil {
		t.Fatalf("first fetch: %+v", first)
	}
	if second.Error != "" || second.Status != http.StatusCreated || second.Body != first.Body || second.Replayed == nil || *second.Replayed != "true" {
		t.Fatalf("second fetch, the replay: %s", res)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// The same without a browser: a replay carries the first answer's CORS
// fields and exposes Idempotent-Replayed; an answer without CORS fields
// gets none.
func TestReplayCarriesCORSFields(t *testing.T) {
	t.Parallel()
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cors" {
			w.Header().Set("Access-Control-Allow-Origin", "https://shop.example")
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Expose-Headers", "Request-Id")
		}
		w.WriteHeader(http.StatusCreated)
	}
	gw := newGateway(t, openLedger(t, "sqlite"), serveQuiet(t, up).URL, nil)
	post(t, gw+"/cors", `{}`, "Idempotency-Key: cors", "Authorization: Bearer c")
	r := post(t, gw+"/cors", `{}`, "Idempotency-Key: cors", "Authorization: Bearer c")
	if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Access-Control-Allow-Origin") != "https://shop.example" ||
		r.header.Get("Access-Control-Allow-Credentials") != "true" ||
		fmt.Sprint(r.header.Values("Access-Control-Expose-Headers")) != "[Request-Id Idempotent-Replayed]" {
		t.Errorf("replay of a CORS answer: %v", r.header)
	}
	post(t, gw+"/plain", `{}`, "Idempotency-Key: plain", "Authorization: Bearer c")
	r = post(t, gw+"/plain", `{}`, "Idempotency-Key: plain", "Authorization: Bearer c")
	if r.header.Get("Idempotent-Replayed") != "true" || len(r.header.Values("Access-Control-Expose-Headers")) != 0 {
		t.Errorf("replay of an answer without CORS fields: %v", r.header)
	}
}

// A double click whose second fetch comes while the first is still at
// the API: the gateway answers 409 request-in-flight itself. With the
// page's origin in CORSOrigins the page reads that 409 and its
// Retry-After; without, the browser hides the gateway's answer and the
// fetch fails as if the network had. One effect either way.
func TestBrowserReadsInFlightAcrossOrigins(t *testing.T) {
	t.Parallel()
	ctx := browsertest.Browser(t)
	var arrived, release chan struct{}
	page := serveQuiet(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ready": // answers once the first charge is at the API
			<-arrived
		case "/release":
			close(release)
		default:
			checkoutPage(w)
		}
	}))
	var effects atomic.Int64
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		if allowPage(w, r, page.URL) {
			return
		}
		effects.Add(1)
		close(arrived)
		<-release
		w.WriteHeader(http.StatusCreated)
	}
	upURL := serveQuiet(t, up).URL
	if err := chromedp.Do(ctx, chromedp.Navigate(page.URL)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		origins []string
		key     string
		want    string
	}{
		{[]string{page.URL}, "click-cors", `[{"status":201},{"status":409,"retryAfter":true}]`},
		{nil, "click-plain", `[{"status":201},{"error":"TypeError: Failed to fetch"}]`},
	} {
		arrived, release = make(chan struct{}), make(chan struct{})
		effects.Store(0)
		gw := newGateway(t, openLedger(t, "sqlite"), upURL, &gateway.Config{CORSOrigins: tt.origins})
		script := fmt.Sprintf(`(async () => {
			const send = () => fetch(%q, {method: "POST", body: '{"amount":1000}', headers: {
				"Authorization": "Bearer browser", "Content-Type": "application/json", "Idempotency-Key": %q}})
				.then(r => r.status == 409 ? {status: r.status, retryAfter: r.headers.get("Retry-After") !== null} : {status: r.status},
					e => ({error: String(e)}));
			const first = send();
			await fetch("/ready");
			const second = await send();
			await fetch("/release");
			return JSON.stringify([await first, second]);
		})()`, gw+"/charges", tt.key)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("CORSOrigins %v: the page's fetches %s, want %s", tt.origins, got, tt.want)
		}
		if n := effects.Load(); n != 1 {
			t.Errorf("CORSOrigins %v: %d charges, want 1", tt.origins, n)
		}
	}
}

// allowPage answers as an API that lets the page at origin call it: its
// CORS field on every answer, and the preflight (passed through the
// gateway unguarded), which it reports having answered.
func allowPage(w http.ResponseWriter, r *http.Request, origin string) (preflight bool) {
	w.Header().Set("Access-Control-Allow-Origin", origin)
	if r.Method != http.MethodOptions {
		return false
	}
	w.Header().Set("Access-Control-Allow-Methods", "POST")
	w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// checkoutPage is the page whose script calls the API through the gateway.
func checkoutPage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	io.WriteString(w, "<!doctype html><title>checkout</title>")
}
