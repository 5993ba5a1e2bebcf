package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPureGoDemo builds the CLI without cgo (modernc.org/sqlite) and runs
// the README's demo against it: the first POST is handled, the retry
// replayed, the changed body refused. It is what a machine without a C
// compiler gets from `go run ./cmd/idem serve --demo`.
func TestPureGoDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "idem")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--demo", "--listen", "127.0.0.1:0")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := make(chan string, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				url <- m[1]
			}
		}
		close(url)
	}()
	var base string
	select {
	case u, ok := <-url:
		if !ok {
			t.Fatalf("idem serve --demo exited before listening:\n%s", log.String())
		}
		base = u
	case <-time.After(60 * time.Second):
		t.Fatalf("idem serve --demo did not listen")
	}
	post := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post(`{"amount":1000}`); r.StatusCode != 201 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first POST: %d replayed=%q, want 201, not replayed", r.StatusCode, r.Header.Get("Idempotent-Replayed"))
	}
	if r := post(`{"amount":1000}`); r.StatusCode != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q, want the same 201, replayed", r.StatusCode, r.Header.Get("Idempotent-Replayed"))
	}
	if r := post(`{"amount":999}`); r.StatusCode != 422 {
		t.Fatalf("changed body: %d, want 422", r.StatusCode)
	}
}
