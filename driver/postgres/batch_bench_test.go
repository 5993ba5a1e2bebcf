package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// BenchmarkClaimComplete measures a claim and its completion (two ledger
// writes) per op, from 1 and 32 goroutines, with group commit at its
// default and off, on a private cluster with fsync on. ops/s counts
// claim+complete pairs. `idem bench --db postgres` prints the same next to
// hand-written SQL; this one is for go test -cpuprofile.
func BenchmarkClaimComplete(b *testing.B) {
	pgtest.RequireBinaries(b)
	ctx := context.Background()
	c, err := pgtest.Start(ctx, &pgtest.Options{Fsync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var dbs atomic.Int64
	for _, batch := range []int{0, -1} {
		for _, par := range []int{1, 32} {
			b.Run(fmt.Sprintf("maxbatch=%d/callers=%d", batch, par), func(b *testing.B) {
				url, err := c.CreateDatabase(ctx, "bench_"+strconv.FormatInt(dbs.Add(1), 10))
				if err != nil {
					b.Fatal(err)
				}
				l, err := dburl.Open(ctx, url, &idem.Options{MaxBatch: batch})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				var n atomic.Int64
				body := []byte(`{"id":"ch_1","amount":1000}`)
				b.SetParallelism(max(par/runtime.GOMAXPROCS(0), 1))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						cl, err := l.Claim(ctx, idem.Op{Scope: "bench", Key: strconv.FormatInt(n.Add(1), 10), Fingerprint: "fp"})
						if err != nil || cl.Outcome != idem.Acquired {
							b.Errorf("claim: %v %v", cl, err)
							return
						}
						if err := l.Complete(ctx, cl, idem.Result{Status: 201, Body: body}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
