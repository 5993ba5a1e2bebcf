package main

import (
	"bytes"
	"database/sql"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	_ "modernc.org/sqlite"
)

// TestKilledMidway runs the program as a real process and kills it after
// the provider charged and before the answer reached it: the worst moment,
// the charge done and not checkpointed. One booking is then resumed by the
// client running again, the other by a completer with no client: each has
// one ride, one charge and one receipt, and the lookup kept the provider
// from being called twice.
func TestKilledMidway(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "rides")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dbFile := filepath.Join(dir, "rides.db")
	p := NewFakeProvider()
	srv := httptest.NewServer(p)
	defer srv.Close()
	args := func(extra ...string) []string {
		return append([]string{"--provider", srv.URL, "--db", dbFile, "--lease", "500ms"}, extra...)
	}
	for _, ride := range []string{"ride-7", "ride-8"} {
		cmd := exec.Command(bin, args(ride)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		var (
			mu   sync.Mutex // held until Start has set cmd.Process
			proc *os.Process
		)
		p.SetAfterCharge(func() {
			mu.Lock()
			defer mu.Unlock()
			proc.Kill()
		})
		mu.Lock()
		err := cmd.Start()
		proc = cmd.Process
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("%s: %v, want it killed\n%s", ride, err, out.String())
		}
	}
	p.SetAfterCharge(nil)

	out, err := exec.Command(bin, args("ride-7")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "booked ride-7, charged ch_1 (replayed: false)") {
		t.Fatalf("client retry: %v\n%s", err, out)
	}
	for i := 0; ; i++ {
		out, err := exec.Command(bin, args("--complete")...).CombinedOutput()
		if err != nil {
			t.Fatalf("completer: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "completed 1 ") {
			break
		}
		if i == 100 {
			t.Fatalf("the completer never finished ride-8: %s", out)
		}
		time.Sleep(100 * time.Millisecond) // ride-8's lease
	}
	out, err = exec.Command(bin, args("ride-8")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "booked ride-8, charged ch_2 (replayed: true)") {
		t.Fatalf("late client: %v\n%s", err, out)
	}

	db, err := sql.Open("sqlite", "file:"+dbFile)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, ride := range []string{"ride-7", "ride-8"} {
		var rides, receipts int
		db.QueryRow(`SELECT count(*) FROM rides WHERE id = ?`, ride).Scan(&rides)
		db.QueryRow(`SELECT count(*) FROM receipts WHERE ride_id = ?`, ride).Scan(&receipts)
		key := idem.StepKey("", "book/"+ride, "charge")
		if rides != 1 || receipts != 1 || p.Calls(key) != 1 {
			t.Errorf("%s: %d rides, %d receipts, %d provider calls; want one of each", ride, rides, receipts, p.Calls(key))
		}
	}
	if p.Charges() != 2 {
		t.Errorf("%d charges at the provider, want 2", p.Charges())
	}
}
