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

// A request the gateway refuses before reading its body (a declared
// length over MaxBody: 413; a malformed key: 400) is answered at once,
// to a client that sends its body only after a 100 Continue (curl does
// past 1 MiB) or only after the answer: with the read timeout on, the
// answer waited for 256 KiB of a body that never came.
func TestRefusedBeforeTheBodyIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{ReadTimeout: time.Minute, Options: &idemhttp.Options{MaxBody: 1 << 20}})
	u, _ := url.Parse(gw)
	for _, c := range []struct {
		name, headers string
		status        int
	}{
		{"over MaxBody", "Idempotency-Key: big\r\nContent-Length: 2000000\r\n", http.StatusRequestEntityTooLarge},
		{"over MaxBody, Expect", "Idempotency-Key: big-expect\r\nContent-Length: 2000000\r\nExpect: 100-continue\r\n", http.StatusRequestEntityTooLarge},
		{"bad key", "Idempotency-Key: \"open\r\nContent-Length: 500000\r\n", http.StatusBadRequest},
		{"bad key, Expect", "Idempotency-Key: \"open\r\nContent-Length: 500000\r\nExpect: 100-continue\r\n", http.StatusBadRequest},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\nContent-Type: application/json\r\n" + c.headers + "\r\n")); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // only so that a broken build fails instead of hanging
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: no answer before the body: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d %v, want %d problem", c.name, resp.StatusCode, resp.Header, c.status)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.seen) != 0 {
		t.Fatalf("refused requests reached the upstream: %v", up.seen)
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
