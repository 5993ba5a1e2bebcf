package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// BenchmarkClaimComplete measures a claim and its completion (two ledger
// writes) per op, from 1 and 32 goroutines, with group commit at its
// default and off, under synchronous=FULL and NORMAL. ops/s counts
// claim+complete pairs. `idem bench` prints the same next to hand-written
// SQL; this one is for go test -cpuprofile.
func BenchmarkClaimComplete(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, batch := range []int{0, -1} {
			for _, par := range []int{1, 32} {
				name := fmt.Sprintf("sync=%s/maxbatch=%d/callers=%d", sync, batch, par)
				b.Run(name, func(b *testing.B) {
					url := "sqlite:" + filepath.Join(b.TempDir(), "bench.db") + "?synchronous=" + sync
					l, err := dburl.Open(context.Background(), url, &idem.Options{MaxBatch: batch})
					if err != nil {
						b.Fatal(err)
					}
					defer l.Close()
					benchClaimComplete(b, l, par)
				})
			}
		}
	}
}

func benchClaimComplete(b *testing.B, l *idem.Ledger, par int) {
	ctx := context.Background()
	var n atomic.Int64
	body := []byte(`{"id":"ch_1","amount":1000}`)
	b.SetParallelism(max(par/runtime.GOMAXPROCS(0), 1))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := l.Claim(ctx, idem.Op{Scope: "bench", Key: strconv.FormatInt(n.Add(1), 10), Fingerprint: "fp"})
			if err != nil || c.Outcome != idem.Acquired {
				b.Errorf("claim: %v %v", c, err)
				return
			}
			if err := l.Complete(ctx, c, idem.Result{Status: 201, Body: body}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
