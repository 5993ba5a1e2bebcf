package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openPrivate starts a cluster of the test's own (this package has no
// TestMain to close a shared one) and opens a migrated driver on it.
func openPrivate(t *testing.T) *postgres.Driver {
	t.Helper()
	pgtest.RequireBinaries(t)
	ctx := context.Background()
	c, err := pgtest.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	url, err := c.CreateDatabase(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	d := postgres.New(pool, &postgres.Options{ClosePool: true})
	if err := d.Setup(ctx, driver.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// A notice sent inside a transaction reaches listeners when it commits and
// never if it rolls back; one sent outside arrives at once.
func TestPostgresListenNotify(t *testing.T) {
	d := openPrivate(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	woken := make(chan string, 10)
	ended := make(chan error, 1)
	go func() { ended <- d.ListenJobs(ctx, func() { close(ready) }, func(q string) { woken <- q }) }()
	select {
	case <-ready:
	case err := <-ended:
		t.Fatalf("listen: %v", err)
	}

	if err := d.NotifyJobs(ctx, driver.Shared, []string{"email"}); err != nil {
		t.Fatal(err)
	}
	if q := <-woken; q != "email" {
		t.Fatalf("woken for %q, want email", q)
	}

	for _, commit := range []bool{false, true} {
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.NotifyJobs(ctx, driver.SQL(tx), []string{"sms", "push"}); err != nil {
			t.Fatal(err)
		}
		select {
		case q := <-woken:
			t.Fatalf("woken for %q before the transaction ended", q)
		case <-time.After(100 * time.Millisecond):
		}
		if !commit {
			tx.Rollback()
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{<-woken: true, <-woken: true}
		if !got["sms"] || !got["push"] {
			t.Fatalf("woken for %v, want sms and push", got)
		}
	}
	select {
	case q := <-woken:
		t.Fatalf("extra wake-up for %q (the rolled-back notice?)", q)
	default:
	}
	cancel()
	if err := <-ended; err == nil {
		t.Fatal("listen ended without an error")
	}
}

// The claim's candidate scan walks idem_jobs_fetch_priority in its order
// (priority, run_at, id): no sort, no sequential scan, however many jobs
// wait. The query is the due CTE of ClaimJobs.
func TestPostgresClaimIsAnIndexScan(t *testing.T) {
	d := openPrivate(t)
	ctx := context.Background()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at, priority)
	SELECT CASE WHEN i % 10 = 0 THEN 'q' ELSE 'other' END, 'k', '\x7b7d', CASE WHEN i % 3 = 0 THEN 'completed' ELSE 'available' END,
		5, now() - i * interval '1 ms', now(), now(), 1 + i % 4
	FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE idem_jobs`); err != nil {
		t.Fatal(err)
	}
	var plan []string
	rows, err := d.Pool().Query(ctx, `EXPLAIN SELECT id FROM idem_jobs WHERE state = 'available' AND queue = 'q' AND run_at <= now()
	ORDER BY priority, run_at, id LIMIT 10 FOR UPDATE OF idem_jobs SKIP LOCKED`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Scan using idem_jobs_fetch_priority") || strings.Contains(text, "Sort") || strings.Contains(text, "Seq Scan") {
		t.Fatalf("claim plan:\n%s", text)
	}
}
