package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// The workloads, in the order they run, and the metrics they report.
const (
	wlDrain  = "drain"  // metric: jobs/s working a queue filled beforehand
	wlBulk   = "bulk"   // metric: jobs/s inserted through the bulk API
	wlSteady = "steady" // metrics: jobs/s and enqueue→run p99 with producers inserting while workers work
	mLatency = "p99"    // the steady workload's enqueue→run p99, ms
)

var workloadNames = []string{wlDrain, wlBulk, wlSteady}

// options are one run's sizes, the same for both sides.
type options struct {
	settings
	Jobs      int           // jobs per workload
	Batch     int           // jobs per bulk insert call
	Producers int           // concurrent producers of the steady workload
	Timeout   time.Duration // bound on one side's one workload
}

// runWorkload runs workload wl for side on a fresh database and returns
// its metrics. It checks the side's own table afterwards: every job the
// workload made is there, completed (or available, for bulk).
func runWorkload(ctx context.Context, dbs *databases, side, wl string, o options) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rec := newRecorder(o.Jobs)
	sys, drop, err := dbs.open(ctx, side, o.settings, rec)
	if err != nil {
		return nil, err
	}
	defer drop()
	out, err := measure(ctx, sys, rec, wl, o)
	if cerr := sys.close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", side, wl, err)
	}
	return out, nil
}

func measure(ctx context.Context, sys system, rec *recorder, wl string, o options) (map[string]float64, error) {
	n := o.Jobs
	out := map[string]float64{}
	want := "completed"
	switch wl {
	case wlDrain:
		if err := sys.insertBulk(ctx, n, o.Batch); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := sys.start(ctx); err != nil {
			return nil, err
		}
		if err := rec.wait(ctx); err != nil {
			return nil, err
		}
		out[wlDrain] = perSec(n, time.Unix(0, rec.last.Load()).Sub(t0))
	case wlBulk:
		t0 := time.Now()
		if err := sys.insertBulk(ctx, n, o.Batch); err != nil {
			return nil, err
		}
		out[wlBulk] = perSec(n, time.Since(t0))
		want = "available"
	case wlSteady:
		if err := sys.start(ctx); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := produce(ctx, sys, n, o.Producers); err != nil {
			return nil, err
		}
		if err := rec.wait(ctx); err != nil {
			return nil, err
		}
		out[wlSteady] = perSec(n, time.Unix(0, rec.last.Load()).Sub(t0))
		lat := rec.latencies()
		if len(lat) != n {
			return nil, fmt.Errorf("%d jobs completed but %d runs recorded", n, len(lat))
		}
		out[mLatency] = float64(percentile(lat, 0.99)) / float64(time.Millisecond)
		// The rest of the latency's shape, for the progress lines only.
		for name, q := range map[string]float64{"p50": 0.5, "p90": 0.9, "max": 1} {
			out[name] = float64(percentile(lat, q)) / float64(time.Millisecond)
		}
	default:
		return nil, fmt.Errorf("unknown workload %q", wl)
	}
	got, err := sys.count(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("count %s jobs: %w", want, err)
	}
	if got != n {
		return nil, fmt.Errorf("%d jobs %s in the table, want %d", got, want, n)
	}
	return out, nil
}

// produce inserts n jobs from p producers, one job per call, each job
// stamped with the time its enqueue began.
func produce(ctx context.Context, sys system, n, p int) error {
	var wg sync.WaitGroup
	errs := make([]error, p)
	for i := range p {
		share := n/p + boolInt(i < n%p)
		wg.Go(func() {
			for range share {
				if err := sys.insert(ctx, noop{T: time.Now().UnixNano()}); err != nil {
					errs[i] = fmt.Errorf("producer %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		d = time.Nanosecond
	}
	return float64(n) / d.Seconds()
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
