package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/syncbuf"

	"github.com/idemdev/idem/internal/pgtest"
)

// gatewayProc is one `idem serve` process.
type gatewayProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	url   string // http://127.0.0.1:port
	admin string // http://127.0.0.1:port, when --admin was given
	out   *syncbuf.Buffer
	done  chan struct{}
	err   error // from Wait, once done is closed
}

var (
	listeningRE = regexp.MustCompile(`^idem serve: listening on (https?://[0-9.:]+)`)
	adminRE     = regexp.MustCompile(`^idem serve: admin on (http://[0-9.:]+)`)
)

// testDB returns a fresh database URL for driver.
func testDB(t *testing.T, driver string) string {
	if driver == "postgres" {
		return pgtest.NewDB(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
}

// startGateway runs `idem serve --listen 127.0.0.1:0 args…` with extra
// environment variables and waits until it listens.
func startGateway(t *testing.T, env []string, args ...string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{t: t, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(idemBin, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.out
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.out.Write([]byte(line + "\n"))
			if m := adminRE.FindStringSubmatch(line); m != nil {
				p.admin = m[1]
			}
			if m := listeningRE.FindStringSubmatch(line); m != nil && p.url == "" {
				p.url = m[1]
				close(ready)
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("idem serve output:\n%s", p.out.String())
		}
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("idem serve exited before listening: %v\n%s", p.err, p.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("idem serve did not listen within 30s:\n%s", p.out.String())
	}
	return p
}

// wait waits for the process to exit and returns its error.
func (p *gatewayProc) wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("idem serve still running after %v:\n%s", d, p.out.String())
		return nil
	}
}

func (p *gatewayProc) signal(sig syscall.Signal) { p.cmd.Process.Signal(sig) }

// execUpstream is a test API that counts executions per key. With dedupe
// it executes a key once and answers every later request with that key
// from its own store, as an upstream that honours Idempotency-Key does.
type execUpstream struct {
	mu     sync.Mutex
	exec   map[string]int    // executions per key and Authorization
	seen   map[string]int    // requests per key
	stored map[string]string // dedupe: the answer per key
	dedupe bool
	delay  time.Duration
}

func newExecUpstream(dedupe bool, delay time.Duration) *execUpstream {
	return &execUpstream{exec: map[string]int{}, seen: map[string]int{}, stored: map[string]string{}, dedupe: dedupe, delay: delay}
}

func (u *execUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen[key]++
	if s, ok := u.stored[key]; ok && u.dedupe {
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, s)
		return
	}
	u.exec[key+"|"+r.Header.Get("Authorization")]++
	n := len(u.exec)
	u.mu.Unlock()
	time.Sleep(u.delay)
	answer := `{"execution":` + strconv.Itoa(n) + `,"key":"` + key + `","auth":"` + r.Header.Get("Authorization") + `","body":` + string(body) + `,"at":"` + time.Now().Format(time.RFC3339Nano) + `"}`
	u.mu.Lock()
	u.stored[key] = answer
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, answer)
}

func (u *execUpstream) executions(key, auth string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.exec[key+"|"+auth]
}

func (u *execUpstream) seenKey(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[key]
}

type answer struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}, Timeout: 30 * time.Second}

// testClient is the credential send uses unless told otherwise.
const testClient = "Bearer test-client"

func send(ctx context.Context, c *http.Client, url, body string, hdr ...string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(k, strings.TrimSpace(v))
	}
	if _, set := req.Header["Authorization"]; !set {
		req.Header.Set("Authorization", testClient) // one caller; without a credential a key is refused
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

// sendUntilDone retries on 409 (and on connection errors while a gateway
// restarts) until another answer comes, for at most d.
func sendUntilDone(t *testing.T, d time.Duration, url, body string, hdr ...string) answer {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		a, err := send(context.Background(), client, url, body, hdr...)
		switch {
		case err != nil:
			last = err.Error()
		case a.status == http.StatusConflict:
			last = a.body
		default:
			return a
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no answer but 409 within %v: %s", d, last)
	return answer{}
}
