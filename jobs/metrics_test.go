package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// metricArgs is a job whose Mode says how its run ends.
type metricArgs struct {
	Mode string `json:"mode"` // ok, fail (permanently), flaky (fails its first attempt)
}

func (metricArgs) Kind() string { return "metric" }

func metricWorker() jobs.Worker[metricArgs] {
	return jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[metricArgs]) error {
		switch {
		case j.Args.Mode == "fail":
			return jobs.Permanent(errors.New("refused"))
		case j.Args.Mode == "flaky" && j.Attempt == 1:
			return errors.New("flaky")
		}
		return nil
	})
}

// Every end of a claim is one transition and one run observation; a job
// whose worker vanished is counted as rescued by the client that claims it
// next; the queue depth is counted in the database on scrape.
func TestMetrics(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := metrics.New(e.driver)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("w"))
		jobs.AddWorker(ws, metricWorker())
		c, err := jobs.New(e.l, &jobs.Config{
			Workers: ws, Metrics: m, Logger: quietLogger(), PollInterval: 10 * time.Millisecond,
			Backoff: func(int) time.Duration { return 0 },
			Queues:  map[string]jobs.QueueConfig{"default": {MaxWorkers: 4}, "later": {}},
		})
		if err != nil {
			t.Fatal(err)
		}
		m.QueueDepthFrom(c.QueueDepth)

		// A worker that claimed a job and vanished: its lease ends at once.
		if _, err := c.Enqueue(ctx, testArgs{N: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if rows, err := e.l.Driver().ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "default", Worker: "ghost", Limit: 1, LeaseID: 1, Lease: time.Millisecond}); err != nil || len(rows) != 1 {
			t.Fatalf("ghost claim: %v %v", rows, err)
		}
		var deadID int64
		for _, mode := range []string{"ok", "fail", "flaky"} {
			r, err := c.Enqueue(ctx, metricArgs{Mode: mode}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if mode == "fail" {
				deadID = r.Job.ID
			}
		}
		if _, err := c.Enqueue(ctx, metricArgs{Mode: "fail"}, &jobs.EnqueueOpts{UniqueKey: "once"}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Enqueue(ctx, metricArgs{Mode: "fail"}, &jobs.EnqueueOpts{UniqueKey: "once"}); err != nil || !res.Duplicate {
			t.Fatalf("duplicate enqueue: %+v %v", res, err)
		}
		for range 2 {
			if _, err := c.Enqueue(ctx, metricArgs{Mode: "ok"}, &jobs.EnqueueOpts{Queue: "later", Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}

		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			n, err := c.Counts(ctx, "default")
			return err == nil && n[idemtype.JobCompleted] == 3 && n[idemtype.JobDead] == 2
		})
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Requeue(ctx, deadID); err != nil {
			t.Fatal(err)
		}

		want := fmt.Sprintf(`
# HELP idem_job_transitions_total Jobs moving between states, by queue.
# TYPE idem_job_transitions_total counter
idem_job_transitions_total{driver=%[1]q,from="available",queue="default",to="running"} 6
idem_job_transitions_total{driver=%[1]q,from="dead",queue="default",to="available"} 1
idem_job_transitions_total{driver=%[1]q,from="none",queue="default",to="available"} 5
idem_job_transitions_total{driver=%[1]q,from="none",queue="later",to="available"} 2
idem_job_transitions_total{driver=%[1]q,from="running",queue="default",to="completed"} 3
idem_job_transitions_total{driver=%[1]q,from="running",queue="default",to="dead"} 2
idem_job_transitions_total{driver=%[1]q,from="running",queue="default",to="rescued"} 1
idem_job_transitions_total{driver=%[1]q,from="running",queue="default",to="retryable"} 1
# HELP idem_queue_depth Jobs waiting, by queue, counted at scrape time.
# TYPE idem_queue_depth gauge
idem_queue_depth{driver=%[1]q,queue="default"} 1
idem_queue_depth{driver=%[1]q,queue="later"} 2
`, e.driver)
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idem_job_transitions_total", "idem_queue_depth"); err != nil {
			t.Error(err)
		}
		runs := histogramCounts(t, m, "idem_job_run_duration_seconds", "outcome")
		if w := map[string]uint64{"succeeded": 3, "retry": 1, "dead": 2}; fmt.Sprint(runs) != fmt.Sprint(w) {
			t.Errorf("job runs by outcome: %v, want %v", runs, w)
		}
	})
}

// histogramCounts returns the sample count of each series of a histogram,
// by the value of one label.
func histogramCounts(t *testing.T, c prometheus.Collector, name, label string) map[string]uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] += s.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}
