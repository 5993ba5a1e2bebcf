package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "modernc.org/sqlite"
)

// The batch: six lines, four distinct pieces of work. Line c repeats a
// with another id and idempotency key; line e repeats b exactly.
const batch = `{"id":"a","model":"m1","messages":[{"role":"user","content":"Summarise the contract"}],"temperature":0}
{"id":"b","model":"m1","messages":[{"role":"user","content":"Translate: bonjour"}],"temperature":0}
{"id":"c","model":"m1","messages":[{"role":"user","content":"Summarise the contract"}],"temperature":0,"idempotency_key":"retry-7"}
{"id":"d","model":"m2","messages":[{"role":"user","content":"Summarise the contract"}],"temperature":0}
{"id":"e","model":"m1","messages":[{"role":"user","content":"Translate: bonjour"}],"temperature":0}
{"id":"f","model":"m1","messages":[{"role":"user","content":"Summarise the contract"}],"temperature":0.7}
`

// model is a fake OpenAI-compatible endpoint that, like providers that
// honour Idempotency-Key, runs each key once and answers a repeat from
// memory. It counts requests and runs, and can kill the batch process
// right after running the k-th call, before it answers: the worst moment,
// the effect done and not yet recorded by the caller.
type model struct {
	mu       sync.Mutex
	requests int
	runs     map[string]int    // by key
	answers  map[string]string // by key
	killAt   int               // kill the batch on this request (0: never)
	kill     func()
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string    `json:"model"`
		Messages []Message `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	m.mu.Lock()
	m.requests++
	answer, seen := m.answers[key]
	if !seen {
		m.runs[key]++
		answer = fmt.Sprintf("%s says: %s (run %d)", req.Model, strings.ToUpper(req.Messages[0].Content), len(m.answers)+1)
		m.answers[key] = answer
	}
	kill := m.killAt != 0 && m.requests == m.killAt
	m.mu.Unlock()
	if kill {
		m.kill()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": Message{Role: "assistant", Content: answer}}}})
}

// TestKilledAndRerun runs the batch as a real process, kills it after the
// model ran the third call and before it answered, and runs it again: the
// model runs each of the four distinct inputs exactly once, and the results
// table holds one answer for each.
func TestKilledAndRerun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "llm-batch")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	batchFile := filepath.Join(dir, "batch.jsonl")
	if err := os.WriteFile(batchFile, []byte(batch), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &model{runs: map[string]int{}, answers: map[string]string{}, killAt: 3}
	srv := httptest.NewServer(m)
	defer srv.Close()
	dbFile := filepath.Join(dir, "batch.db")

	runBatch := func() (string, error) {
		cmd := exec.Command(bin, "--endpoint", srv.URL, "--db", dbFile, "--lease", "2s", batchFile)
		var out strings.Builder
		cmd.Stderr, cmd.Stdout = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		m.kill = func() { cmd.Process.Kill() }
		m.mu.Unlock()
		err := cmd.Wait()
		return out.String(), err
	}
	out, err := runBatch()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("first run: %v, want it killed\n%s", err, out)
	}
	m.mu.Lock()
	m.killAt = 0
	m.mu.Unlock()
	if out, err := runBatch(); err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	} else if !strings.Contains(out, "fingerprint=jcs-sha256:") {
		t.Errorf("log lines lack the fingerprint:\n%s", out)
	}
	if out, err := runBatch(); err != nil { // a third run has nothing left to do
		t.Fatalf("third run: %v\n%s", err, out)
	}

	db, err := sql.Open("sqlite", "file:"+dbFile)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var results int
	if err := db.QueryRow(`SELECT count(*) FROM results`).Scan(&results); err != nil || results != 4 {
		t.Errorf("results table holds %d answers (%v), want one per distinct input: 4", results, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.runs) != 4 {
		t.Errorf("the model ran %d distinct inputs, want 4", len(m.runs))
	}
	for key, n := range m.runs {
		if n != 1 {
			t.Errorf("input %s ran %d times", key, n)
		}
	}
	t.Logf("%d requests reached the model for %d distinct inputs; each ran once", m.requests, len(m.runs))
}
