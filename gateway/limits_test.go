package gateway_test

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
)

// A client that sends the headers and 10 of 100 body bytes, then nothing,
// is cut off by the read timeout: 408, nothing claimed, upstream not
// called. The bound is a configured 100ms; the test only waits for it.
func TestStalledBodyCutOff(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{ReadTimeout: 100 * time.Millisecond})
	u, _ := url.Parse(gw)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.Write([]byte("POST /charges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" +
		"Idempotency-Key: stalled\r\nAuthorization: Bearer x\r\n\r\n" + `{"amount":`))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // only so that a broken build fails instead of hanging
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("stalled body: %d %v, want 408 problem", resp.StatusCode, resp.Header)
	}
	if up.count("stalled") != 0 {
		t.Fatal("a stalled request reached the upstream")
	}
	if _, err := record(t, l, "stalled"); err == nil {
		t.Fatal("a stalled request claimed its key")
	}
	// A whole request on a fresh connection is not affected.
	if r := post(t, gw+"/charges", `{}`, "Idempotency-Key: fine"); r.status != 201 {
		t.Fatalf("after a stalled one, a normal request got %d", r.status)
	}
}

// Past MaxInFlight concurrent guarded requests, another gets 503 too-busy
// with Retry-After, and nothing is claimed for it.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "slow" {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(201)
	}
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Options: &idemhttp.Options{MaxInFlight: 1}})
	done := make(chan reply)
	go func() { done <- post(t, gw, `{}`, "Idempotency-Key: slow") }()
	<-entered
	defer func() {
		select {
		case <-release:
		default:
			close(release) // a failed check must not leave the upstream blocked
		}
	}()
	r := post(t, gw, `{}`, "Idempotency-Key: other")
	wantProblem(t, r, 503, idemhttp.ProblemTooBusy)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("too-busy without Retry-After")
	}
	if _, err := record(t, l, "other"); err == nil {
		t.Fatal("a refused request claimed its key")
	}
	close(release)
	if r := <-done; r.status != 201 {
		t.Fatalf("slow: %d", r.status)
	}
	if r := post(t, gw, `{}`, "Idempotency-Key: other"); r.status != 201 {
		t.Fatalf("after the slot freed: %d", r.status)
	}
}
