package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// total is the number of executions, whatever their key.
func (u *execUpstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.exec {
		n += c
	}
	return n
}

// writeConfig writes a --config file into a fresh directory.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkConfig runs `idem serve --config FILE --check args…`.
func checkConfig(t *testing.T, file string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, append([]string{"serve", "--config", file, "--check"}, args...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestServeConfigExampleChecks(t *testing.T) {
	t.Parallel()
	file, err := filepath.Abs(filepath.Join("..", "..", "examples", "serve-config", "payments.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, code := checkConfig(t, file)
	if code != 0 || !strings.Contains(out, "configuration valid (6 routes") {
		t.Fatalf("the example config: exit %d\n%s", code, out)
	}
}

// A bad file exits 2, and every error names the file's line and the route.
func TestServeConfigCheckErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		yaml string
		want []string
	}{
		{"routes:\n  - route: POST /a\n    lease: -1s\n", []string{`routes.yaml:3: route "POST /a": lease:`}},
		{"routes:\n  - route: POST /a\n    on-5xx: maybe\n", []string{`routes.yaml:3: route "POST /a": on-5xx: "maybe"`}},
		{"routes:\n  - route: POST /a\n    leese: 1s\n", []string{`routes.yaml:3: unknown setting "leese"`, `route "POST /a"`}},
		{"routes:\n  - route: POST /a\n  - route: POST /a\n", []string{`routes.yaml:3: route "POST /a": already given on line 2`}},
		{"routes:\n  - route: POST /a\n  - route: \"GET /x/{\"\n", []string{`routes.yaml:3: route "GET /x/{"`, "wildcard"}},
		{"routes:\n  - route: POST /a\n    methods: PUT\n", []string{`routes.yaml:3: route "POST /a": methods`}},
		{"routes:\n  - route: POST /a\n    key-from: cookie:x\n", []string{`routes.yaml:3: route "POST /a": key-from:`}},
		{"routes:\n  - route: POST /a\n    allow-headers: [Set-Cookie]\n", []string{`routes.yaml:3: route "POST /a": allow-headers:`}},
		{"routes:\n  - route: GET /a\n    guard: false\n    lease: 1s\n", []string{`routes.yaml:4: route "GET /a": lease: the route is not guarded`}},
		{"routes:\n  - lease: 1s\n", []string{`routes.yaml:2: route without route:`}},
		{"routes:\n  - route: POST /a\n   lease: 1s\n", []string{`routes.yaml: line`}},
		{"paths: []\n", []string{`routes.yaml:1: unknown key "paths"`}},
		{"", []string{`routes.yaml: empty`}},
	}
	for _, c := range cases {
		out, code := checkConfig(t, writeConfig(t, c.yaml))
		if code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", c.yaml, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: output does not say %q:\n%s", c.yaml, w, out)
			}
		}
	}
	// A flag a route inherits is checked, and named, for that route too.
	out, code := checkConfig(t, writeConfig(t, "routes:\n  - route: POST /a\n"), "--lease", "0s")
	if code != 2 || !strings.Contains(out, "--lease") {
		t.Errorf("bad inherited flag: exit %d\n%s", code, out)
	}
	if _, code := checkConfig(t, filepath.Join(t.TempDir(), "missing.yaml")); code != 2 {
		t.Errorf("missing file: exit %d, want 2", code)
	}
}

// Routes get their own policies; requests no route matches get the flags'.
func TestServeConfigRoutes(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		up := newExecUpstream(false, 0)
		cfg := writeConfig(t, `
routes:
  - route: POST /payments
    require-key: true
  - route: POST /hooks/{provider}
    key-from: fingerprint
    exclude: [/sent_at]
    anonymous-scope: shared
  - route: POST /open
    guard: false
`)
		gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, driver), "--config", cfg)
		ctx := context.Background()

		a, _ := send(ctx, client, gw.url+"/payments", `{"amount":1}`)
		if a.status != 400 || !strings.Contains(a.body, "key-missing") {
			t.Fatalf("keyless POST /payments: %d %q, want 400 key-missing", a.status, a.body)
		}
		a, _ = send(ctx, client, gw.url+"/charges", `{"amount":1}`)
		if a.status != 201 {
			t.Fatalf("keyless POST /charges (the defaults: passed through): %d %q", a.status, a.body)
		}

		hook := func(body string) answer {
			t.Helper()
			a, err := send(ctx, client, gw.url+"/hooks/stripe", body, "Authorization:")
			if err != nil || a.status != 201 {
				t.Fatalf("hook %s: %d %q %v", body, a.status, a.body, err)
			}
			return a
		}
		base := up.total()
		first := hook(`{"event":"paid","sent_at":"10:00"}`)
		again := hook(`{"event":"paid","sent_at":"10:00"}`)
		later := hook(`{"event":"paid","sent_at":"10:05"}`)
		if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || later.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("identical work was not replayed: %q / %q / %q", first.body, again.body, later.body)
		}
		if n := up.total() - base; n != 1 {
			t.Fatalf("the upstream ran one webhook %d times", n)
		}
		if other := hook(`{"event":"refunded","sent_at":"10:00"}`); other.header.Get("Idempotent-Replayed") != "" || up.total()-base != 2 {
			t.Fatalf("other work was replayed: %q", other.body)
		}

		for range 2 {
			send(ctx, client, gw.url+"/open", `{}`, "Idempotency-Key: open-1")
		}
		if n := up.executions("open-1", testClient); n != 2 {
			t.Fatalf("an unguarded route ran %d times for two requests, want 2", n)
		}
	})
}

// --key-from fingerprint as a flag, for the one-route case.
func TestServeKeyFromFingerprint(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		up := newExecUpstream(false, 0)
		gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, driver), "--key-from", "fingerprint", "--exclude", "/request_id")
		ctx := context.Background()
		a, _ := send(ctx, client, gw.url+"/chat", `{"model":"m","messages":["hi"],"request_id":"r1"}`)
		b, _ := send(ctx, client, gw.url+"/chat", `{"messages":["hi"],"model":"m","request_id":"r2"}`)
		c, _ := send(ctx, client, gw.url+"/chat", `{"model":"m","messages":["hello"],"request_id":"r1"}`)
		if a.status != 201 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" || c.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("answers: %d %q / %q %v / %q %v", a.status, a.body, b.body, b.header, c.body, c.header)
		}
		if n := up.total(); n != 2 {
			t.Fatalf("the upstream ran %d times for two distinct inputs", n)
		}
		if key := a.body[strings.Index(a.body, `"key":"`)+7:]; !strings.HasPrefix(key, "http-sha256:") {
			t.Fatalf("the upstream did not get the derived key: %q", a.body)
		}
	})
}

// SIGHUP reloads the file atomically; a bad file keeps the old policies
// and says why.
func TestServeConfigReload(t *testing.T) {
	t.Parallel()
	up := newExecUpstream(false, 0)
	cfg := writeConfig(t, "routes:\n  - route: POST /x\n    guard: false\n")
	gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, "sqlite"), "--config", cfg)
	ctx := context.Background()
	if a, _ := send(ctx, client, gw.url+"/x", `{}`); a.status != 201 {
		t.Fatalf("unguarded route: %d %q", a.status, a.body)
	}

	if err := os.WriteFile(cfg, []byte("routes:\n  - route: POST /x\n    require-key: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gw.signal(syscall.SIGHUP)
	for a, tries := (answer{}), 0; a.status != 400; tries++ {
		if tries == 3000 {
			t.Fatalf("the new policy did not take hold after %d requests:\n%s", tries, gw.out.String())
		}
		if a, _ = send(ctx, client, gw.url+"/x", `{}`); a.status != 201 && a.status != 400 {
			t.Fatalf("during reload: %d %q", a.status, a.body)
		}
		select {
		case <-gw.done:
			t.Fatalf("idem serve exited on SIGHUP: %v", gw.err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	if err := os.WriteFile(cfg, []byte("routes:\n  - route: POST /x\n    lease: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gw.signal(syscall.SIGHUP)
	for tries := 0; !strings.Contains(gw.out.String(), "not reloaded"); tries++ {
		if tries == 3000 {
			t.Fatalf("no reload error logged:\n%s", gw.out.String())
		}
		select {
		case <-gw.done:
			t.Fatalf("idem serve exited on a bad reload: %v", gw.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if out := gw.out.String(); !strings.Contains(out, "routes.yaml:3") || !strings.Contains(out, "previous policies stay") {
		t.Fatalf("the reload error does not name the line:\n%s", out)
	}
	if a, _ := send(ctx, client, gw.url+"/x", `{}`); a.status != 400 || !strings.Contains(a.body, "key-missing") {
		t.Fatalf("after a bad reload: %d %q, want the previous policy (400 key-missing)", a.status, a.body)
	}
}
