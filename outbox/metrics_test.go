package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/metrics"
	"github.com/idemdev/idem/outbox"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Each delivery attempt is counted by outcome, a chunk sent again is a
// chunk retry, and the deliveries' job transitions carry the outbox queue.
func TestMetrics(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		rcv.fail = func(key string, call int) int {
			switch {
			case key == "bad":
				return http.StatusBadRequest // failed: dead at once
			case key == "down":
				return http.StatusServiceUnavailable // retry, then dead
			case key == "fan/2" && call <= 3: // the first attempt's three sends
				return http.StatusServiceUnavailable // retry, then delivered
			}
			return 0
		}
		l := openLedger(t, url)
		m := metrics.New("test")
		cfg := fastConfig()
		cfg.Metrics, cfg.MaxAttempts = m, 2
		ob, err := outbox.New(l, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"ok", "bad", "down"} {
			add(t, ob, outbox.Message{ID: id, URL: rcv.URL, Body: []byte(`{}`)})
		}
		add(t, ob, outbox.Message{ID: "fan", URL: rcv.URL, Body: []byte(`{}`), Recipients: []string{"a", "b"}, ChunkSize: 1})

		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "every delivery settled", func() bool {
			n, err := ob.Jobs().Counts(ctx, outbox.DefaultQueue)
			return err == nil && n[idemtype.JobCompleted] == 3 && n[idemtype.JobDead] == 2
		})
		if err := ob.Stop(ctx); err != nil {
			t.Fatal(err)
		}

		want := `
# HELP idem_outbox_deliveries_total Outbox delivery attempts, by outcome (delivered, retry, failed, dead).
# TYPE idem_outbox_deliveries_total counter
idem_outbox_deliveries_total{driver="test",outcome="dead"} 1
idem_outbox_deliveries_total{driver="test",outcome="delivered"} 3
idem_outbox_deliveries_total{driver="test",outcome="failed"} 1
idem_outbox_deliveries_total{driver="test",outcome="retry"} 2
# HELP idem_chunk_retries_total Fan-out chunks sent again after a failure.
# TYPE idem_chunk_retries_total counter
idem_chunk_retries_total{driver="test",face="outbox"} 1
`
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idem_outbox_deliveries_total", "idem_chunk_retries_total"); err != nil {
			t.Error(err)
		}
		for _, tr := range []struct {
			from, to string
			n        float64
		}{{"none", "available", 5}, {"available", "running", 7}, {"running", "completed", 3}, {"running", "retryable", 2}, {"running", "dead", 2}} {
			if got := transitions(t, m, tr.from, tr.to); got != tr.n {
				t.Errorf("%s → %s on queue outbox: %v, want %v", tr.from, tr.to, got, tr.n)
			}
		}
	})
}

// Redeliver requeues the dead deliveries of a message and refuses one with
// none dead; List shows where each delivery is.
func TestRedeliverAndList(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		refuse := true
		rcv.fail = func(key string, call int) int {
			if refuse && key == "fan/2" {
				return http.StatusBadRequest
			}
			return 0
		}
		l := openLedger(t, url)
		ob := newOutbox(t, l)
		add(t, ob, outbox.Message{ID: "fan", URL: rcv.URL, Body: []byte(`{}`), Recipients: []string{"a", "b", "c"}, ChunkSize: 1})
		if _, err := ob.Redeliver(ctx, "fan"); !errors.Is(err, jobs.ErrWrongState) {
			t.Fatalf("redeliver with nothing dead: %v, want ErrWrongState", err)
		}
		if _, err := ob.Redeliver(ctx, "nope"); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("redeliver of an unknown id: %v, want ErrNotFound", err)
		}
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(ctx)
		waitFor(t, 30*time.Second, "chunk 2 dead", func() bool {
			ds, err := ob.List(ctx, &outbox.ListParams{State: idemtype.JobDead})
			return err == nil && len(ds) == 1 && ds[0].Key == "fan/2" && ds[0].URL == rcv.URL && strings.Contains(ds[0].LastError, "HTTP 400")
		})
		rcv.mu.Lock()
		refuse = false
		rcv.mu.Unlock()
		ds, err := ob.Redeliver(ctx, "fan")
		if err != nil || len(ds) != 1 || ds[0].Key != "fan/2" || ds[0].State != idemtype.JobAvailable {
			t.Fatalf("redeliver: %+v %v", ds, err)
		}
		waitFor(t, 30*time.Second, "all delivered", func() bool {
			st, err := ob.Status(ctx, "fan")
			if err != nil || len(st) != 3 {
				return false
			}
			for _, d := range st {
				if d.State != idemtype.JobCompleted || d.Outcome == nil || d.Outcome.Status != 200 {
					return false
				}
			}
			return true
		})
		if calls, effects := rcv.snapshot(); calls["fan/1"] != 1 || effects["fan/2"] != 1 {
			t.Errorf("calls %v, effects %v: only chunk 2 should have been sent again", calls, effects)
		}
	})
}

// transitions reads one series of idem_job_transitions_total on queue
// outbox.
func transitions(t *testing.T, m *metrics.Collector, from, to string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"queue": outbox.DefaultQueue, "from": from, "to": to}
	for _, mf := range mfs {
		if mf.GetName() != "idem_job_transitions_total" {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	return 0
}
