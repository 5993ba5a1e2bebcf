package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/outbox"
)

// outboxSeed makes a database whose outbox holds message order-42 (waiting
// for a relay) and a fan-out campaign-7 of three chunks: chunk 1 delivered
// (HTTP 200), chunk 2 dead (HTTP 410), chunk 3 waiting.
func outboxSeed(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ob, err := outbox.New(l, &outbox.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []outbox.Message{
		{ID: "campaign-7", URL: "https://hooks.example.com/push", Body: []byte(`{}`), Recipients: []string{"a", "b", "c"}, ChunkSize: 1},
		{ID: "order-42", URL: "https://hooks.example.com/order", Body: []byte(`{}`)},
	} {
		if _, err := ob.Add(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	drv := l.Driver()
	rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: outbox.DefaultQueue, Worker: "relay-1", Limit: 2, LeaseID: 3, Lease: time.Hour})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	for i, p := range []driver.FinishJobParams{
		{State: idemtype.JobCompleted, Result: []byte(`{"status":200,"body":"ok"}`)},
		{State: idemtype.JobDead, Error: "outbox: deliver campaign-7/2: HTTP 410: gone"},
	} {
		p.JobFence = driver.JobFence{ID: rows[i].ID, Attempt: rows[i].Attempt, LeaseID: rows[i].LeaseID}
		if err := drv.FinishJob(ctx, driver.Shared, p); err != nil {
			t.Fatal(err)
		}
	}
	return url
}

func TestOutboxList(t *testing.T) {
	t.Parallel()
	url := outboxSeed(t)
	r := opRun(t, "", "outbox", "list", "--db", url).must(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "KEY") {
		t.Fatalf("want a header and 4 rows:\n%s", r.stdout)
	}
	for _, want := range []string{"campaign-7/1", "delivered", "HTTP 200", "campaign-7/2", "dead just now", "HTTP 410: gone", "order-42", "https://hooks.example.com/order", "waiting for a relay"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	var ds []deliveryJSON
	r = opRun(t, "", "outbox", "list", "--db", url, "--state", "dead", "--json").must(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &ds); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if len(ds) != 1 || ds[0].Key != "campaign-7/2" || ds[0].State != idemtype.JobDead || ds[0].DeadAt == nil || !strings.Contains(ds[0].LastError, "410") {
		t.Errorf("dead: %+v", ds)
	}
	r = opRun(t, "", "outbox", "list", "--db", url, "--queue", "other", "--json").must(t, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("another queue: %s", r.stdout)
	}
	for _, args := range [][]string{{"--state", "delivered"}, {"--limit", "0"}, {"x"}, {"--queue", "bad queue"}} {
		r := opRun(t, "", append([]string{"outbox", "list", "--db", url}, args...)...)
		if r.code != 2 || r.stdout != "" || r.stderr == "" {
			t.Errorf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
	}
}

func TestOutboxRedeliver(t *testing.T) {
	t.Parallel()
	url := outboxSeed(t)
	r := opRun(t, "", "outbox", "redeliver", "--db", url, "campaign-7", "--attempts", "2").must(t, 0)
	if !strings.Contains(r.stdout, "redelivering campaign-7/2") || !strings.Contains(r.stdout, "attempt 2 of 3 next") || strings.Contains(r.stdout, "campaign-7/1") {
		t.Errorf("redeliver: %s", r.stdout)
	}
	var ds []deliveryJSON
	json.Unmarshal([]byte(opRun(t, "", "outbox", "list", "--db", url, "--state", "dead", "--json").must(t, 0).stdout), &ds)
	if len(ds) != 0 {
		t.Errorf("still dead: %+v", ds)
	}

	r = opRun(t, "", "outbox", "redeliver", "--db", url, "campaign-7").must(t, 1)
	if !strings.Contains(r.stderr, "refused: no delivery of campaign-7 is dead") || !strings.Contains(r.stderr, "campaign-7/1 is delivered") {
		t.Errorf("nothing dead: %q", r.stderr)
	}
	r = opRun(t, "", "outbox", "redeliver", "--db", url, "order-4").must(t, 1)
	if !strings.Contains(r.stderr, "no delivery order-4 on queue outbox") {
		t.Errorf("unknown id: %q", r.stderr)
	}
	opRun(t, "", "outbox", "redeliver", "--db", url).must(t, 2)
	opRun(t, "", "outbox", "redeliver", "--db", url, "a", "b").must(t, 2)
}
