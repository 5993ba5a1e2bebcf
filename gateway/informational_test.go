package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
)

// An upstream's 103 Early Hints reaches the client before the answer, with
// its own fields; the answer is stored and replayed without them, and the
// first answer has only its own fields too (net/http keeps the map a 1xx
// was written from: the hint's Link leaked into the first 201, which its
// replays lacked).
func TestEarlyHintsAreTheirOwn(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1}`)
	}
	gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
	send := func() (hints []string, resp *http.Response, body string) {
		req, _ := http.NewRequest("POST", gw+"/charges", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer early")
		req.Header.Set("Idempotency-Key", "early-hints")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hints = append(hints, h.Values("Link")...)
				}
				return nil
			},
		}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return hints, resp, string(b)
	}
	hints, first, body := send()
	if len(hints) != 1 || first.StatusCode != http.StatusCreated || body != `{"id":1}` {
		t.Fatalf("first: hints %q, %d %q; want the hint, then 201", hints, first.StatusCode, body)
	}
	if link := first.Header.Values("Link"); len(link) != 0 {
		t.Errorf("the first 201 carries the hint's Link %q", link)
	}
	_, replay, rbody := send()
	if replay.StatusCode != http.StatusCreated || rbody != body || replay.Header.Get("Idempotent-Replayed") != "true" || len(replay.Header.Values("Link")) != 0 {
		t.Errorf("replay: %d %q %v; want the first answer again", replay.StatusCode, rbody, replay.Header)
	}
	if n := up.count("early-hints"); n != 1 {
		t.Fatalf("the upstream was called %d times, want once", n)
	}
}
