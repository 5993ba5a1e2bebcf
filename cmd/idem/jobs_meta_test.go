package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/jobs"
)

// jobs show and jobs list --json print a job's metadata and partition key.
func TestJobsShowMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(ctx, jobs.Raw{Name: "report", Data: []byte(`{}`)},
		&jobs.EnqueueOpts{Metadata: json.RawMessage(`{"tenant": "acme"}`), PartitionKey: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	id := strconv.FormatInt(r.Job.ID, 10)
	out := opRun(t, "", "jobs", "show", "--db", url, id).must(t, 0)
	for _, want := range []string{`metadata:`, `{"tenant":"acme"}`, "partition:", "acme"} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, out.stdout)
		}
	}
	out = opRun(t, "", "jobs", "list", "--db", url, "--json").must(t, 0)
	var list []jobJSON
	if err := json.Unmarshal([]byte(out.stdout), &list); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	if len(list) != 1 || json.Unmarshal(list[0].Metadata, &meta) != nil || meta["tenant"] != "acme" || list[0].PartitionKey != "acme" {
		t.Fatalf("list --json: %s", out.stdout)
	}
}
