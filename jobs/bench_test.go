package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
)

// benchURL is a fresh database for one benchmark, durable as in
// production: SQLite with its default synchronous=FULL, and PostgreSQL in a
// private cluster with fsync on (the shared test cluster runs without), one
// per top-level benchmark. IDEM_BENCH_FSYNC=0 measures without durability
// instead (SQLite synchronous=NORMAL, the shared fsync=off cluster), which
// shows what the code costs apart from the disk.
func benchURL(b *testing.B, top *testing.B, driver string, cluster **pgtest.Cluster) string {
	b.Helper()
	if os.Getenv("IDEM_BENCH_FSYNC") == "0" {
		return dbURL(b, driver)
	}
	if driver == "sqlite" {
		return "sqlite:" + filepath.Join(b.TempDir(), "bench.db")
	}
	pgtest.RequireBinaries(b)
	if *cluster == nil {
		c, err := pgtest.Start(context.Background(), &pgtest.Options{Fsync: true})
		if err != nil {
			b.Fatal(err)
		}
		top.Cleanup(func() { c.Close() })
		*cluster = c
	}
	url, err := (*cluster).CreateDatabase(context.Background(), fmt.Sprintf("bench_%d", benchSeq.Add(1)))
	if err != nil {
		b.Fatal(err)
	}
	return url
}

var benchSeq atomic.Int64

// BenchmarkEnqueue measures one Enqueue per op (each its own commit), and a
// batch of 100 per EnqueueMany (one commit); jobs/s is per job.
func BenchmarkEnqueue(b *testing.B) {
	top, cluster := b, (*pgtest.Cluster)(nil)
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			for _, batch := range []int{1, 100} {
				b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
					l := openLedger(b, benchURL(b, top, driver, &cluster))
					c, err := jobs.New(l, &jobs.Config{Logger: quietLogger()})
					if err != nil {
						b.Fatal(err)
					}
					params := make([]jobs.EnqueueParams, batch)
					for i := range params {
						params[i] = jobs.EnqueueParams{Args: testArgs{N: i}}
					}
					ctx := context.Background()
					b.ResetTimer()
					for b.Loop() {
						if _, err := c.EnqueueMany(ctx, params); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
				})
			}
		})
	}
}

// BenchmarkClaimComplete measures the whole worker path (claim in batches,
// heartbeat, run, complete) for jobs whose handler does nothing, with 1, 8,
// 32, 100 and 800 workers in one client (100 and 800: the clients of idem
// bench's claim+complete row at 1 and 8). The jobs are enqueued before the clock
// starts; the clock stops when the client has stopped with all completed.
func BenchmarkClaimComplete(b *testing.B) {
	top, cluster := b, (*pgtest.Cluster)(nil)
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			for _, workers := range []int{1, 8, 32, 100, 800} {
				b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
					l := openLedger(b, benchURL(b, top, driver, &cluster))
					var done atomic.Int64
					all := make(chan struct{})
					ws := jobs.NewWorkers()
					jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
						if done.Add(1) == int64(b.N) {
							close(all)
						}
						return nil
					}))
					c, err := jobs.New(l, &jobs.Config{Workers: ws, Logger: quietLogger(), PollInterval: 50 * time.Millisecond,
						Queues: map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: workers}}})
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					for i := 0; i < b.N; i += 1000 {
						params := make([]jobs.EnqueueParams, min(1000, b.N-i))
						for k := range params {
							params[k] = jobs.EnqueueParams{Args: testArgs{N: i + k}}
						}
						if _, err := c.EnqueueMany(ctx, params); err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					if err := c.Start(ctx); err != nil {
						b.Fatal(err)
					}
					<-all
					if err := c.Stop(ctx); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
					if n, _ := c.Counts(ctx, ""); n[idemtype.JobCompleted] != b.N {
						b.Fatalf("completed %v of %d", n, b.N)
					}
				})
			}
		})
	}
}
