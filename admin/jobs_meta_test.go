package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// A dead job's metadata and partition key are on the page, escaped.
func TestLedgerDeadJobsShowMetadata(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	c, err := jobs.New(f.l, &jobs.Config{Logger: slog.New(slog.DiscardHandler), Queues: map[string]jobs.QueueConfig{"email": {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, jobs.Raw{Name: "send-welcome", Data: []byte(`{}`)}, &jobs.EnqueueOpts{Queue: "email", MaxAttempts: 1,
		Metadata: json.RawMessage(`{"tenant":"<acme>"}`), PartitionKey: "tenant-7"}); err != nil {
		t.Fatal(err)
	}
	drv := f.l.Driver()
	rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "email", Worker: "w", Limit: 1, LeaseID: 9, Lease: time.Minute})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	fence := driver.JobFence{ID: rows[0].ID, Attempt: rows[0].Attempt, LeaseID: rows[0].LeaseID}
	if err := drv.FinishJob(ctx, driver.Shared, driver.FinishJobParams{JobFence: fence, State: idemtype.JobDead, Error: "no"}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, f, &admin.Options{DeadJobs: admin.LedgerDeadJobs(f.l)})
	_, body, _ := get(t, client(t), srv.URL+"/")
	for _, want := range []string{"<th>metadata</th>", "partition <code>tenant-7</code>", `&lt;acme&gt;`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
