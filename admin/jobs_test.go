package admin_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// killJob enqueues a job and dead-letters it as a worker would, through
// the driver: no worker runs.
func killJob(t *testing.T, f fixture, key, errText string) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := jobs.New(f.l, &jobs.Config{Logger: slog.New(slog.DiscardHandler), Queues: map[string]jobs.QueueConfig{"email": {}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(ctx, jobs.Raw{Name: "send-welcome", Data: []byte(`{}`)}, &jobs.EnqueueOpts{Queue: "email", UniqueKey: key, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	drv := f.l.Driver()
	rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "email", Worker: "w", Limit: 1, LeaseID: 9, Lease: time.Minute})
	if err != nil || len(rows) != 1 || rows[0].ID != r.Job.ID {
		t.Fatalf("claim: %v %v", rows, err)
	}
	fence := driver.JobFence{ID: rows[0].ID, Attempt: rows[0].Attempt, LeaseID: rows[0].LeaseID}
	if err := drv.FinishJob(ctx, driver.Shared, driver.FinishJobParams{JobFence: fence, State: idemtype.JobDead, Error: errText}); err != nil {
		t.Fatal(err)
	}
	return r.Job.ID
}

// The page lists dead jobs straight from the ledger's database, most
// recently dead first, escaped, without any jobs client running.
func TestLedgerDeadJobs(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, &admin.Options{DeadJobs: admin.LedgerDeadJobs(f.l)})
	if _, body, _ := get(t, client(t), srv.URL+"/"); !strings.Contains(body, `<section id="jobs">`) || strings.Contains(body, "jobs-off") {
		t.Fatal("jobs section missing or off")
	} else if !strings.Contains(body[strings.Index(body, `<section id="jobs">`):], "None.") {
		t.Error("no dead jobs yet: want None.")
	}

	killJob(t, f, "welcome-1", "smtp: 550 <first> unavailable")
	killJob(t, f, "welcome-<2>", "smtp: 550 <second> unavailable")
	_, body, _ := get(t, client(t), srv.URL+"/")
	for _, want := range []string{"send-welcome", "welcome-1", "welcome-&lt;2&gt;", "smtp: 550 &lt;first&gt; unavailable", "smtp: 550 &lt;second&gt; unavailable"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Index(body, "&lt;second&gt;") > strings.Index(body, "&lt;first&gt;") {
		t.Error("the most recently dead job should come first")
	}

	srv = serve(t, f, &admin.Options{ListLimit: 1, DeadJobs: admin.LedgerDeadJobs(f.l)})
	if _, body, _ := get(t, client(t), srv.URL+"/"); !strings.Contains(body, "&lt;second&gt;") || strings.Contains(body, "&lt;first&gt;") {
		t.Error("ListLimit 1: want only the most recent dead job")
	}
}

// The queues section shows each queue's jobs by state and whether it is
// paused, straight from the ledger's database.
func TestLedgerJobQueues(t *testing.T) {
	t.Parallel()
	f := seed(t)
	srv := serve(t, f, &admin.Options{JobQueues: admin.LedgerJobQueues(f.l)})
	if _, body, _ := get(t, client(t), srv.URL+"/"); !strings.Contains(body, `<section id="queues">`) {
		t.Fatal("queues section missing")
	}
	killJob(t, f, "welcome-1", "boom")
	c, err := jobs.New(f.l, &jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(context.Background(), "email"); err != nil {
		t.Fatal(err)
	}
	_, body, _ := get(t, client(t), srv.URL+"/")
	sec := body[strings.Index(body, `<section id="queues">`):]
	sec = sec[:strings.Index(sec, "</section>")]
	if !strings.Contains(sec, "<tr class=\"queue\"><td>email</td><td><strong class=\"paused\">paused</strong> since") || !strings.Contains(sec, `<td>0</td><td class="age">-</td><td>0</td><td>0</td><td>1</td><td>0</td>`) {
		t.Errorf("queues section:\n%s", sec)
	}
	if _, body, _ := get(t, client(t), serve(t, f, nil).URL+"/"); strings.Contains(body, `<section id="queues">`) {
		t.Error("without JobQueues the section should be left out")
	}
}
