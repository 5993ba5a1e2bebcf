package gateway_test

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemdev/idem"
)

// gzipUpstream answers JSON, gzipped to a client that accepts gzip, as most
// web frameworks do.
func gzipUpstream() *upstream {
	up := newUpstream()
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		body := `{"id":"ch_` + strings.Repeat("1", 64) + `","amount":1000}`
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(201)
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		w.WriteHeader(201)
		io.WriteString(w, body)
	}
	return up
}

func decodedBody(t *testing.T, r reply) string {
	t.Helper()
	if r.header.Get("Content-Encoding") != "gzip" {
		return r.body
	}
	zr, err := gzip.NewReader(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("labelled gzip, not gzip: %v", err)
	}
	b, _ := io.ReadAll(zr)
	return string(b)
}

// A compressing upstream: the first answer and every replay decode to the
// same JSON, for clients that accept gzip and clients that do not.
func TestCompressedUpstream(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		up := gzipUpstream()
		gw := newGateway(t, l, serveQuiet(t, up).URL, nil)
		clients := []string{"Accept-Encoding: gzip, deflate, br", "Accept-Encoding: identity", "Accept-Encoding: gzip;q=0"}
		for i, first := range clients[:2] {
			key := "Idempotency-Key: k" + string(rune('0'+i))
			a := post(t, gw, `{}`, key, first)
			want := decodedBody(t, a)
			if a.status != 201 || !json.Valid([]byte(want)) {
				t.Fatalf("first answer (%s): %d %q", first, a.status, want)
			}
			for _, ae := range clients {
				r := post(t, gw, `{}`, key, ae)
				if r.header.Get("Idempotent-Replayed") != "true" || decodedBody(t, r) != want {
					t.Fatalf("first %q, replay to %q: %v %q, want %q", first, ae, r.header, r.body, want)
				}
			}
		}
	})
}

// Real clients: Python requests, Node fetch and curl --compressed send
// Accept-Encoding gzip, curl without --compressed sends none; each gets the same JSON
// from the first answer and from replays. Skipped where they are missing.
func TestCompressedUpstreamRealClients(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	gw := newGateway(t, l, serveQuiet(t, gzipUpstream()).URL, nil) + "/charges"
	var want string
	check := func(client, got string) {
		t.Helper()
		got = strings.TrimSpace(got)
		if !json.Valid([]byte(got)) {
			t.Fatalf("%s got %q: not the JSON answer", client, got)
		}
		if want == "" {
			want = got
		}
		if got != want {
			t.Fatalf("%s got %q, want %q", client, got, want)
		}
	}
	ran := false
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import requests").Run() == nil {
		ran = true
		script := `import sys, requests
for _ in range(2):
    r = requests.post(sys.argv[1], json={"amount": 1000}, headers={"Idempotency-Key": "real-1", "Authorization": "Bearer real"})
    assert r.status_code == 201, r.status_code
    print(r.text)
`
		out, err := exec.Command(py, "-c", script, gw).CombinedOutput()
		if err != nil {
			t.Fatalf("python requests: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			check("python requests", line)
		}
	}
	if node, err := exec.LookPath("node"); err == nil {
		ran = true
		script := `(async () => {
  for (let i = 0; i < 2; i++) {
    const r = await fetch(process.argv[1], {method: "POST", body: '{"amount":1000}',
      headers: {"Content-Type": "application/json", "Idempotency-Key": "real-1", "Authorization": "Bearer real"}});
    if (r.status !== 201) throw new Error("status " + r.status);
    console.log(await r.text());
  }
})().catch(e => { console.error(e); process.exit(1); });`
		out, err := exec.Command(node, "-e", script, gw).CombinedOutput()
		if err != nil {
			t.Fatalf("node fetch: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			check("node fetch", line)
		}
	}
	if curl, err := exec.LookPath("curl"); err == nil {
		ran = true
		for _, compressed := range []bool{true, true, false} {
			args := []string{"-sS", "-X", "POST", gw, "-H", "Idempotency-Key: real-1", "-H", "Authorization: Bearer real",
				"-H", "Content-Type: application/json", "-d", `{"amount":1000}`}
			if compressed {
				args = append([]string{"--compressed"}, args...)
			}
			out, err := exec.Command(curl, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("curl %v: %v\n%s", args, err, out)
			}
			check("curl (compressed "+map[bool]string{true: "yes", false: "no"}[compressed]+")", string(out))
		}
	}
	if !ran {
		t.Skip("none of python3 with requests, node or curl on PATH")
	}
}

// Real clients that compress what they upload: Python requests and Node
// fetch send a gzip body (each gzip made anew, so the bytes differ), curl
// a file it was given compressed. The upstream, which decodes gzip bodies,
// gets each body as it was sent and charges once; every client gets the
// first answer. Skipped where none of them is installed.
func TestCompressedUploadRealClients(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	var mu sync.Mutex
	var charges int
	up.handle = func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "not gzip: "+err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		var in struct{ Amount int }
		if err := json.NewDecoder(body).Decode(&in); err != nil || in.Amount != 1000 {
			http.Error(w, fmt.Sprintf("bad body: %v %+v", err, in), http.StatusBadRequest)
			return
		}
		mu.Lock()
		charges++
		n := charges
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d","amount":1000}`, n)
	}
	gw := newGateway(t, l, serveQuiet(t, up).URL, nil) + "/charges"
	var answers []string
	ran := false
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import requests").Run() == nil {
		ran = true
		script := `import gzip, json, sys, requests
for mtime in (1, 2):
    body = gzip.compress(json.dumps({"amount": 1000, "currency": "eur"}).encode(), mtime=mtime)
    r = requests.post(sys.argv[1], data=body, headers={"Idempotency-Key": "upload-1", "Authorization": "Bearer real",
        "Content-Type": "application/json", "Content-Encoding": "gzip"})
    print(r.status_code, r.headers.get("Idempotent-Replayed", "-"), r.text)
`
		out, err := exec.Command(py, "-c", script, gw).CombinedOutput()
		if err != nil {
			t.Fatalf("python requests: %v\n%s", err, out)
		}
		answers = append(answers, strings.Split(strings.TrimSpace(string(out)), "\n")...)
	}
	if node, err := exec.LookPath("node"); err == nil {
		ran = true
		script := `const zlib = require("node:zlib");
(async () => {
  for (const body of [zlib.gzipSync('{"currency":"eur","amount":1000}', {level: 1}), zlib.gzipSync('{"amount": 1000, "currency": "eur"}')]) {
    const r = await fetch(process.argv[1], {method: "POST", body,
      headers: {"Content-Type": "application/json", "Content-Encoding": "gzip", "Idempotency-Key": "upload-1", "Authorization": "Bearer real"}});
    console.log(r.status, r.headers.get("idempotent-replayed") || "-", await r.text());
  }
})().catch(e => { console.error(e); process.exit(1); });`
		out, err := exec.Command(node, "-e", script, gw).CombinedOutput()
		if err != nil {
			t.Fatalf("node fetch: %v\n%s", err, out)
		}
		answers = append(answers, strings.Split(strings.TrimSpace(string(out)), "\n")...)
	}
	if curl, err := exec.LookPath("curl"); err == nil {
		ran = true
		file := filepath.Join(t.TempDir(), "body.json.gz")
		var b strings.Builder
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, `{"amount":1000,"currency":"eur"}`)
		zw.Close()
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(curl, "-sS", "-X", "POST", gw, "-H", "Idempotency-Key: upload-1", "-H", "Authorization: Bearer real",
			"-H", "Content-Type: application/json", "-H", "Content-Encoding: gzip", "--data-binary", "@"+file,
			"-w", "\n%{http_code}").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		body, code, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		answers = append(answers, code+" curl "+body)
	}
	if !ran {
		t.Skip("none of python3 with requests, node or curl on PATH")
	}
	want := `{"id":"ch_1","amount":1000}`
	for i, a := range answers {
		f := strings.SplitN(a, " ", 3)
		if len(f) != 3 || f[0] != "201" || f[2] != want || (i > 0 && f[1] == "-") {
			t.Errorf("answer %d: %q, want 201 %s (a replay after the first)", i, a, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if charges != 1 {
		t.Fatalf("%d charges, want 1", charges)
	}
}
