package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/prove"
)

func eachServeDriver(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

func upstreamServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// 200 concurrent identical requests with one key through the real binary:
// the upstream executes once, and every client ends with the same body
// (retrying its 409s).
func TestServeConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		up := newExecUpstream(false, 300*time.Millisecond)
		gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, driver))
		const clients = 200
		bodies := make([]string, clients)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range clients {
			wg.Go(func() {
				<-start
				a := sendUntilDone(t, 30*time.Second, gw.url+"/charges", `{"amount":1000}`, "Idempotency-Key: storm")
				if a.status != http.StatusCreated {
					t.Errorf("client %d: %d %s", i, a.status, a.body)
				}
				bodies[i] = a.body
			})
		}
		close(start)
		wg.Wait()
		if n := up.executions("storm", testClient); n != 1 {
			t.Fatalf("upstream executed %d times, want 1", n)
		}
		for i, b := range bodies {
			if b != bodies[0] {
				t.Fatalf("client %d got %q, client 0 got %q", i, b, bodies[0])
			}
		}
	})
}

// Two gateway processes on one PostgreSQL database: duplicates split
// between them execute once.
func TestServeTwoGatewaysOnePostgres(t *testing.T) {
	t.Parallel()
	db := testDB(t, "postgres")
	up := newExecUpstream(false, 100*time.Millisecond)
	upURL := upstreamServer(t, up)
	gws := []*gatewayProc{
		startGateway(t, nil, "--upstream", upURL, "--db", db),
		startGateway(t, nil, "--upstream", upURL, "--db", db),
	}
	const keys, dups = 20, 6
	bodies := make([][]string, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		bodies[k] = make([]string, dups)
		for d := range dups {
			wg.Go(func() {
				<-start
				a := sendUntilDone(t, 30*time.Second, gws[d%2].url+"/charges", fmt.Sprintf(`{"order":%d}`, k), fmt.Sprintf("Idempotency-Key: order-%d", k))
				bodies[k][d] = a.body
			})
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if n := up.executions(fmt.Sprintf("order-%d", k), testClient); n != 1 {
			t.Errorf("key order-%d executed %d times", k, n)
		}
		for d := range dups {
			if bodies[k][d] != bodies[k][0] {
				t.Errorf("key order-%d: gateway %d answered %q, gateway 0 %q", k, d%2, bodies[k][d], bodies[k][0])
			}
		}
	}
}

// The gateway dies (SIGKILL) after the upstream answered and before the
// answer was recorded. After a restart, the retry is forwarded again with
// the same key once the lease ends; the upstream, deduplicating on the
// key, executes once, and the client gets one consistent answer.
func TestServeCrashAfterUpstreamAnswered(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		up := newExecUpstream(true, 0)
		upURL, db := upstreamServer(t, up), testDB(t, driver)
		args := []string{"--upstream", upURL, "--db", db, "--lease", "1s"}
		// As idem prove starts it: only the prover's processes arm crash points.
		first := startGateway(t, []string{prove.WorkerEnv + "=1", crashpoint.EnvVar + "=" + crashpoint.AfterCall}, args...)
		noReuse := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		if a, err := send(context.Background(), noReuse, first.url+"/charges", `{"amount":5}`, "Idempotency-Key: crash"); err == nil {
			t.Fatalf("the client got %d %q from a gateway that should have died", a.status, a.body)
		}
		err := first.wait(10 * time.Second)
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("gateway exit: %v, want killed by SIGKILL at the crash point", err)
		}
		if up.seenKey("crash") != 1 {
			t.Fatalf("upstream saw the key %d times before the crash, want 1", up.seenKey("crash"))
		}

		second := startGateway(t, nil, args...)
		a := sendUntilDone(t, 20*time.Second, second.url+"/charges", `{"amount":5}`, "Idempotency-Key: crash")
		if a.status != http.StatusCreated {
			t.Fatalf("retry after restart: %d %s", a.status, a.body)
		}
		if up.seenKey("crash") != 2 || up.executions("crash", testClient) != 1 {
			t.Fatalf("upstream saw the key %d times and executed %d; want 2 and 1", up.seenKey("crash"), up.executions("crash", testClient))
		}
		again := sendUntilDone(t, 5*time.Second, second.url+"/charges", `{"amount":5}`, "Idempotency-Key: crash")
		if again.body != a.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("second retry: %q %v, want %q replayed", again.body, again.header, a.body)
		}
	})
}

// The client gives up after the request reached the upstream; the gateway
// records the answer anyway, and the retry replays it.
func TestServeClientDisconnect(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		up := newExecUpstream(false, 500*time.Millisecond)
		gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, driver))
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if _, err := send(ctx, client, gw.url+"/charges", `{"amount":7}`, "Idempotency-Key: gone"); err == nil {
			t.Fatal("the request was not cut off")
		}
		a := sendUntilDone(t, 10*time.Second, gw.url+"/charges", `{"amount":7}`, "Idempotency-Key: gone")
		if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %v %s, want the recorded 201", a.status, a.header, a.body)
		}
		if n := up.executions("gone", testClient); n != 1 {
			t.Fatalf("executed %d times", n)
		}
	})
}

// Same key, two credentials: two executions, no leak, and one scope's
// in-flight request never makes the other answer 409.
func TestServeScopes(t *testing.T) {
	t.Parallel()
	up := newExecUpstream(false, 400*time.Millisecond)
	gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, "sqlite"))
	done := make(chan answer)
	go func() {
		a, _ := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: shared", "Authorization: Bearer alice")
		done <- a
	}()
	for up.seenKey("shared") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	bob, err := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: shared", "Authorization: Bearer bob")
	if err != nil || bob.status != http.StatusCreated || !strings.Contains(bob.body, "bob") {
		t.Fatalf("bob, while alice's request was in flight: %d %q %v", bob.status, bob.body, err)
	}
	alice := <-done
	for range 2 {
		a := sendUntilDone(t, 5*time.Second, gw.url+"/charges", `{}`, "Idempotency-Key: shared", "Authorization: Bearer alice")
		b := sendUntilDone(t, 5*time.Second, gw.url+"/charges", `{}`, "Idempotency-Key: shared", "Authorization: Bearer bob")
		if a.body != alice.body || b.body != bob.body || strings.Contains(a.body, "bob") || strings.Contains(b.body, "alice") {
			t.Fatalf("replays crossed scopes: alice %q, bob %q", a.body, b.body)
		}
	}
	if up.executions("shared", "Bearer alice") != 1 || up.executions("shared", "Bearer bob") != 1 {
		t.Fatalf("executions: %v", up.exec)
	}
}

// Callers that authenticate by cookie or X-Api-Key send no Authorization:
// with default flags their keyed requests are refused (naming the fix),
// never answered from another caller's record; --scope-header
// hmac:X-Api-Key scopes them apart, storing no raw API key.
func TestServeAnonymousCallers(t *testing.T) {
	t.Parallel()
	up := newExecUpstream(false, 0)
	gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, "sqlite"))
	for _, who := range []string{"Cookie: session=alice", "Cookie: session=bob"} {
		a, err := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: order-1", "Authorization:", who)
		if err != nil || a.status != 400 || !strings.Contains(a.body, "scope-missing") || !strings.Contains(a.body, "--anonymous-scope shared") {
			t.Fatalf("%s without Authorization: %d %q %v", who, a.status, a.body, err)
		}
	}
	if up.seenKey("order-1") != 0 {
		t.Fatalf("a refused request reached the upstream")
	}

	db := testDB(t, "sqlite")
	keyed := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", db, "--scope-header", "hmac:X-Api-Key")
	a, _ := send(context.Background(), client, keyed.url+"/charges", `{}`, "Idempotency-Key: order-2", "Authorization:", "X-Api-Key: key-alice")
	b, _ := send(context.Background(), client, keyed.url+"/charges", `{}`, "Idempotency-Key: order-2", "Authorization:", "X-Api-Key: key-bob")
	if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "" || up.seenKey("order-2") != 2 {
		t.Fatalf("hmac:X-Api-Key: %d %d %v, upstream saw %d", a.status, b.status, b.header, up.seenKey("order-2"))
	}
	out, err := exec.Command(idemBin, "keys", "list", "--db", db, "--json").CombinedOutput()
	if err != nil || strings.Contains(string(out), "key-alice") || !strings.Contains(string(out), "x-api-key-hmac:") {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
}

// SIGTERM lets an in-flight request finish and record its answer; the
// process exits 0 and a restarted gateway replays the answer.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	up := newExecUpstream(false, 500*time.Millisecond)
	upURL, db := upstreamServer(t, up), testDB(t, "sqlite")
	gw := startGateway(t, nil, "--upstream", upURL, "--db", db)
	done := make(chan answer)
	go func() {
		a, _ := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: drain")
		done <- a
	}()
	for up.seenKey("drain") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	gw.signal(syscall.SIGTERM)
	first := <-done
	if first.status != http.StatusCreated {
		t.Fatalf("in-flight request during drain: %d %q", first.status, first.body)
	}
	if err := gw.wait(10 * time.Second); err != nil {
		t.Fatalf("exit after drain: %v", err)
	}
	again := startGateway(t, nil, "--upstream", upURL, "--db", db)
	a := sendUntilDone(t, 5*time.Second, again.url+"/charges", `{}`, "Idempotency-Key: drain")
	if a.body != first.body || a.header.Get("Idempotent-Replayed") != "true" || up.executions("drain", testClient) != 1 {
		t.Fatalf("after restart: %q %v, %d executions", a.body, a.header, up.executions("drain", testClient))
	}
}

// `idem serve --demo` works alone: replay, 409 and 422 with curl's
// requests; settings come from the environment; --admin serves health
// and metrics.
func TestServeDemo(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, []string{"IDEM_DB=" + testDB(t, "sqlite"), "IDEM_DEMO=true", "IDEM_ADMIN=127.0.0.1:0"})
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !strings.Contains(gw.out.String(), "Idempotency-Key: order-42"); {
		time.Sleep(10 * time.Millisecond) // stdout and stderr arrive through separate pipes
	}
	if !strings.Contains(gw.out.String(), "Idempotency-Key: order-42") {
		t.Errorf("--demo did not print the curl commands:\n%s", gw.out.String())
	}
	url := gw.url + "/charges"
	a, _ := send(context.Background(), client, url, `{"amount":1000}`, "Idempotency-Key: order-42", "Authorization:") // as the README's curl: no credential
	b, _ := send(context.Background(), client, url, `{ "amount": 1000 }`, "Idempotency-Key: order-42", "Authorization:")
	c, _ := send(context.Background(), client, url, `{"amount":999}`, "Idempotency-Key: order-42", "Authorization:")
	if a.status != 201 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" || c.status != 422 {
		t.Fatalf("demo: %d, %d %v, %d", a.status, b.status, b.header, c.status)
	}
	slow := make(chan answer)
	go func() {
		a, _ := send(context.Background(), client, url, `{"amount":5}`, "Idempotency-Key: slow", "Demo-Delay: 1s")
		slow <- a
	}()
	time.Sleep(300 * time.Millisecond) // let the slow request claim the key first
	var conflict answer
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if conflict, _ = send(context.Background(), client, url, `{"amount":5}`, "Idempotency-Key: slow"); conflict.status == 409 {
			break
		}
	}
	if conflict.status != 409 || conflict.header.Get("Retry-After") == "" {
		t.Fatalf("concurrent retry: %d %v", conflict.status, conflict.header)
	}
	if s := <-slow; s.status != 201 || !strings.Contains(s.body, `"charges_for_this_key": 1`) {
		t.Fatalf("slow charge: %d %s", s.status, s.body)
	}
	if gw.admin == "" {
		t.Fatalf("no admin address in the log:\n%s", gw.out.String())
	}
	want := map[string]string{
		"/healthz": "ok",
		"/metrics": `idem_claims_total{driver="sqlite",face="gateway",outcome="replay"} 1`,
		"/":        "parked",
	}
	for path, text := range want {
		resp, err := http.Get(gw.admin + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("admin %s: %v %v", path, resp, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), text) {
			t.Errorf("admin %s lacks %q:\n%.2000s", path, text, body)
		}
	}
}

// Bad flags and bad environment values exit 2 with a message naming them.
func TestServeBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{}, "--upstream"},
		{nil, []string{"--upstream", "ftp://x"}, "--upstream"},
		{nil, []string{"--upstream", "http://x", "--demo"}, "--upstream"},
		{nil, []string{"--demo", "--lease", "0s"}, "--lease"},
		{nil, []string{"--demo", "--lease", "soon"}, "-lease"},
		{nil, []string{"--demo", "--max-body", "huge"}, "-max-body"},
		{nil, []string{"--demo", "--on-conflict", "maybe"}, "--on-conflict"},
		{nil, []string{"--demo", "--on-5xx", "retry"}, "--on-5xx"},
		{nil, []string{"--demo", "--key-from", "cookie:x"}, "--key-from"},
		{nil, []string{"--demo", "--allow-headers", "Set-Cookie"}, "--allow-headers"},
		{nil, []string{"--demo", "--allow-headers", "WWW-Authenticate"}, "--allow-headers"},
		{nil, []string{"--demo", "--exclude", "nope"}, "--exclude"},
		{nil, []string{"--demo", "--release-status", "429,soon"}, "--release-status"},
		{nil, []string{"--demo", "--release-status", "503"}, "--release-status"},
		{nil, []string{"--demo", "--read-timeout", "0s"}, "--read-timeout"},
		{nil, []string{"--demo", "--idle-timeout", "-1s"}, "--idle-timeout"},
		{nil, []string{"--demo", "--max-inflight", "0"}, "--max-inflight"},
		{nil, []string{"--demo", "--memory-limit", "lots"}, "-memory-limit"},
		{nil, []string{"--demo", "--db", "mysql://x"}, "--db"},
		{nil, []string{"--demo", "--nope"}, "-nope"},
		{[]string{"IDEM_MAX_RESPONSE=lots"}, []string{"--demo"}, "IDEM_MAX_RESPONSE"},
		{[]string{"IDEM_REQUIRE_KEY=perhaps"}, []string{"--demo"}, "IDEM_REQUIRE_KEY"},
		{nil, []string{"--demo", "--admin-token", "0123456789abcdef0123"}, "--admin-token"},
		{nil, []string{"--demo", "--admin-write"}, "--admin-write"},
		{nil, []string{"--demo", "--admin", "0.0.0.0:0"}, "--admin"},
		{nil, []string{"--demo", "--admin", "127.0.0.1:0", "--admin-token", "short"}, "--admin"},
		{nil, []string{"--upstream", "http://127.0.0.1:1", "--db", "sqlite:gw.db", "--admin", "0.0.0.0:0"}, "--admin"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // a flag wrongly accepted would serve forever
		cmd := exec.CommandContext(ctx, idemBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, c.args...)...)
		cmd.Dir = dir // the default database, sqlite:idem.db, would land here
		cmd.Env = append(cmd.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("idem serve %v (env %v): exit %v, output %q; want exit 2 naming %s", c.args, c.env, err, out, c.want)
		}
		if left, _ := os.ReadDir(dir); len(left) > 0 {
			t.Errorf("idem serve %v (env %v) left %s behind: flags must be checked before anything is created", c.args, c.env, left[0].Name())
		}
	}
	out, err := exec.Command(idemBin, "serve", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "IDEM_MAX_BODY") || !strings.Contains(string(out), "--upstream") && !strings.Contains(string(out), "-upstream") {
		t.Errorf("--help: %v %s", err, out)
	}
}

// --read-timeout cuts off a body that stalls (headers, 10 of 100 bytes,
// silence) instead of holding the connection open for ever.
func TestServeStalledBody(t *testing.T) {
	t.Parallel()
	up := newExecUpstream(false, 0)
	gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, "sqlite"), "--read-timeout", "200ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("POST /charges HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nIdempotency-Key: stall\r\nAuthorization: Bearer x\r\n\r\n0123456789"))
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // so that a regression fails instead of hanging
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %v %v, want 408", resp, err)
	}
	if up.seenKey("stall") != 0 {
		t.Fatal("a stalled request reached the upstream")
	}
}

// Running the README demo twice: the second run starts as fresh as the
// first (its ledger is emptied with its charge counter), so the first
// curl is charged once again instead of replaying a charge the demo no
// longer knows.
func TestServeDemoTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for run := range 2 {
		cmd := exec.Command(idemBin, "serve", "--demo", "--listen", "127.0.0.1:0")
		cmd.Dir = dir
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		var url, line string
		for url == "" && sc.Scan() {
			line = sc.Text()
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				url = m[1]
			}
		}
		if url == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("run %d: no listening line", run)
		}
		go io.Copy(io.Discard, stderr)
		if !strings.Contains(line, "idem-demo.db") || !strings.Contains(line, "share one scope") {
			t.Errorf("run %d: the startup line does not say how the demo runs: %s", run, line)
		}
		a, err := send(context.Background(), client, url+"/charges", `{"amount":1000}`, "Idempotency-Key: order-42", "Authorization:")
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil || a.status != 201 || a.header.Get("Idempotent-Replayed") != "" || !strings.Contains(a.body, `"charges_for_this_key": 1`) {
			t.Fatalf("run %d: first curl got %d %v %q %v; want a fresh charge", run, a.status, a.header, a.body, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "idem.db")); err == nil {
		t.Error("the demo wrote the default idem.db")
	}
}

// --memory-limit sets the runtime's soft limit; one below what
// --max-inflight requests may hold is accepted with a warning.
func TestServeMemoryLimit(t *testing.T) {
	t.Parallel()
	low := startGateway(t, []string{"IDEM_DB=" + testDB(t, "sqlite"), "IDEM_DEMO=true"}, "--memory-limit", "64MiB")
	high := startGateway(t, []string{"IDEM_DB=" + testDB(t, "sqlite"), "IDEM_DEMO=true"}, "--memory-limit", "1GiB", "--max-inflight", "100")
	for _, gw := range []*gatewayProc{low, high} {
		if a, _ := send(context.Background(), client, gw.url+"/charges", `{"amount":1}`, "Idempotency-Key: m", "Authorization:"); a.status != 201 {
			t.Fatalf("with --memory-limit: %d %s", a.status, a.body)
		}
	}
	const warning = "--memory-limit is below what --max-inflight requests may hold"
	if out := low.out.String(); !strings.Contains(out, warning) || !strings.Contains(out, "in_flight_bound=512MiB") {
		t.Errorf("64MiB for 256 × 2 MiB in flight: no warning:\n%s", out)
	}
	if out := high.out.String(); strings.Contains(out, warning) {
		t.Errorf("1GiB for 100 × 2 MiB in flight: warned:\n%s", out)
	}
}

// --cors-origins gives the gateway's own answers CORS fields for the
// listed origins; a value that is not an origin exits 2 naming it.
func TestServeCORSOrigins(t *testing.T) {
	t.Parallel()
	up := upstreamServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"), "--cors-origins", "https://shop.example, http://localhost:3000")
	hdr := []string{"Idempotency-Key: cors-1", "Authorization: Bearer a", "Origin: https://shop.example"}
	first, err := send(context.Background(), client, gw.url+"/charges", `{"a":1}`, hdr...)
	if err != nil || first.status != 201 || first.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("the upstream's answer: %d %v %v", first.status, first.header, err)
	}
	reused, err := send(context.Background(), client, gw.url+"/charges", `{"a":2}`, hdr...)
	if err != nil || reused.status != 422 || reused.header.Get("Access-Control-Allow-Origin") != "https://shop.example" ||
		reused.header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("422 key-mismatch: %d %v %v", reused.status, reused.header, err)
	}
	out, err := exec.Command(idemBin, "serve", "--demo", "--check", "--cors-origins", "https://shop.example/pay").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `--cors-origins: CORS origin "https://shop.example/pay"`) {
		t.Fatalf("a path in an origin: %v\n%s", err, out)
	}
}

// The listener speaks HTTP/2 in the clear to clients that know it does
// (h2c with prior knowledge, as Envoy and Cloud Run speak to backends):
// a retry over HTTP/2 gets the replay, one effect.
func TestServeH2C(t *testing.T) {
	t.Parallel()
	up, effects := countingUpstream(t)
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 30 * time.Second}
	for i, want := range []string{"", "true"} {
		req, _ := http.NewRequest("POST", gw.url+"/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "h2c-1")
		req.Header.Set("Authorization", "Bearer a")
		resp, err := h2c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != want {
			t.Fatalf("request %d: %s %d, Idempotent-Replayed %q", i+1, resp.Proto, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// --preserve-host sends the upstream the Host the client asked for.
func TestServePreserveHost(t *testing.T) {
	t.Parallel()
	up := upstreamServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Host)
	}))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, strings.TrimPrefix(up, "http://")},
		{[]string{"--preserve-host"}, "api.example.com"},
	} {
		gw := startGateway(t, nil, append([]string{"--upstream", up, "--db", testDB(t, "sqlite")}, tt.args...)...)
		req, _ := http.NewRequest("POST", gw.url+"/charges", strings.NewReader(`{}`))
		req.Host = "api.example.com"
		req.Header.Set("Idempotency-Key", "host-1")
		req.Header.Set("Authorization", "Bearer a")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || string(b) != tt.want {
			t.Fatalf("%v: %d, the upstream saw Host %q, want %q", tt.args, resp.StatusCode, b, tt.want)
		}
	}
}

// --trusted-proxies: behind a load balancer on a trusted address the
// upstream gets the client's address and https as the balancer set them;
// without the flag the gateway sets them itself. A bad address is named.
func TestServeTrustedProxies(t *testing.T) {
	t.Parallel()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s|%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"))
	})
	up := upstreamServer(t, echo)
	lb := []string{"Authorization: Bearer a", "X-Forwarded-For: 203.0.113.7", "X-Forwarded-Proto: https"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1|http"},
		{[]string{"--trusted-proxies", "10.0.0.0/8, 127.0.0.1"}, "203.0.113.7, 127.0.0.1|https"},
	} {
		gw := startGateway(t, nil, append([]string{"--upstream", up, "--db", testDB(t, "sqlite")}, tt.args...)...)
		r, err := send(context.Background(), client, gw.url+"/charges", `{}`, append([]string{"Idempotency-Key: lb-1"}, lb...)...)
		if err != nil || r.status != 201 || r.body != tt.want {
			t.Fatalf("%v: %d %q %v, want the upstream to see %q", tt.args, r.status, r.body, err, tt.want)
		}
	}
	out, err := exec.Command(idemBin, "serve", "--demo", "--check", "--trusted-proxies", "10.0.0.0/33").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `--trusted-proxies: "10.0.0.0/33" is neither`) {
		t.Fatalf("a bad prefix: %v\n%s", err, out)
	}
}
