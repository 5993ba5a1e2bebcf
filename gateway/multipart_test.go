package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// File uploads retried by the application: Python requests, Node's
// FormData and curl -F draw a new multipart boundary for every request,
// so each retry is other bytes. Each is the same request: the upstream
// runs once per client's key and every retry gets the replay. Skipped
// where none of them is installed.
func TestMultipartRetryRealClients(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	up := newUpstream()
	gw := newGateway(t, l, serveQuiet(t, up).URL, nil) + "/files"
	file := filepath.Join(t.TempDir(), "evidence.txt")
	if err := os.WriteFile(file, []byte("signed receipt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients := map[string][]string{}
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import requests").Run() == nil {
		clients["python"] = []string{py, "-c", `import sys, requests
for _ in range(2):
    with open(sys.argv[2], "rb") as f:
        r = requests.post(sys.argv[1], files={"file": ("evidence.txt", f, "text/plain")}, data={"purpose": "dispute_evidence"},
            headers={"Idempotency-Key": "upload-python", "Authorization": "Bearer real"})
    print(r.status_code, r.headers.get("Idempotent-Replayed", "-"))
`, gw, file}
	}
	if node, err := exec.LookPath("node"); err == nil {
		clients["node"] = []string{node, "-e", `const fs = require("node:fs");
(async () => {
  for (let i = 0; i < 2; i++) {
    const form = new FormData();
    form.append("purpose", "dispute_evidence");
    form.append("file", new Blob([fs.readFileSync(process.argv[2])], {type: "text/plain"}), "evidence.txt");
    const r = await fetch(process.argv[1], {method: "POST", body: form, headers: {"Idempotency-Key": "upload-node", "Authorization": "Bearer real"}});
    console.log(r.status, r.headers.get("idempotent-replayed") || "-");
  }
})().catch(e => { console.error(e); process.exit(1); });`, gw, file}
	}
	if curl, err := exec.LookPath("curl"); err == nil {
		clients["curl"] = []string{"sh", "-c", `for i in 1 2; do "$0" -sS -o /dev/null -D - "$1" -H 'Idempotency-Key: upload-curl' -H 'Authorization: Bearer real' \
  -F purpose=dispute_evidence -F "file=@$2;type=text/plain" | awk 'NR==1{s=$2} tolower($1)=="idempotent-replayed:"{r=$2} END{sub(/\r/,"",r); print s, (r==""?"-":r)}'; done`, curl, gw, file}
	}
	if len(clients) == 0 {
		t.Skip("none of python3 with requests, node or curl on PATH")
	}
	for name, argv := range clients {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if got := strings.Fields(string(out)); strings.Join(got, " ") != "201 - 201 true" {
			t.Errorf("%s: %q, want a 201 and its replay", name, out)
		}
		if n := up.count("upload-" + name); n != 1 {
			t.Errorf("%s: the upstream ran %d times, want 1", name, n)
		}
	}
}
