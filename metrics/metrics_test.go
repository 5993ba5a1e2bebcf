package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is a test clock for the ledger: every lease and retention decision
// reads it instead of the database's.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type bundle struct {
	l     *idem.Ledger
	m     *metrics.Collector
	clock *clock
}

// drivers names the databases every ledger-backed test runs on.
var drivers = []string{"sqlite", "postgres"}

func dbURL(t *testing.T, driver string) string {
	if driver == "postgres" {
		return pgtest.NewDB(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
}

func setup(t *testing.T, driver string, opts *idem.Options) bundle {
	t.Helper()
	b := bundle{m: metrics.New(driver), clock: &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	o := idem.Options{}
	if opts != nil {
		o = *opts
	}
	o.Observer = b.m.Observer()
	o.Logger = slog.New(slog.DiscardHandler)
	o.Clock = b.clock.now
	l, err := dburl.Open(context.Background(), dbURL(t, driver), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	b.l = l
	b.m.CountFrom(l, nil)
	return b
}

func claim(t *testing.T, l *idem.Ledger, op idem.Op) *idem.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), op)
	if err != nil {
		t.Fatalf("claim %q: %v", op.Key, err)
	}
	return c
}

func TestLedgerEventsBecomeSeries(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, driver, &idem.Options{TombstoneTTL: time.Hour, Retention: time.Minute, Lease: 10 * time.Second})
			l := b.l

			a := claim(t, l, idem.Op{Key: "a", Fingerprint: "f"})                                  // acquired
			if c := claim(t, l, idem.Op{Key: "a", Fingerprint: "f"}); c.Outcome != idem.InFlight { // in_flight
				t.Fatalf("second claim: %v", c.Outcome)
			}
			if err := l.Complete(ctx, a, idem.Result{Status: 200, Body: []byte("ok")}); err != nil {
				t.Fatal(err)
			}
			claim(t, l, idem.Op{Key: "a", Fingerprint: "f"})     // replay
			claim(t, l, idem.Op{Key: "a", Fingerprint: "other"}) // mismatch

			s := claim(t, l, idem.Op{Key: "s", Fingerprint: "f"}) // acquired, then abandoned
			p := claim(t, l, idem.Op{Key: "p", Fingerprint: "f"}) // acquired, will be parked
			b.clock.add(11 * time.Second)
			if c := claim(t, l, idem.Op{Key: "s", Fingerprint: "f"}); c.Outcome != idem.Reclaimed {
				t.Fatalf("reclaim: %v", c.Outcome)
			}
			if err := l.Complete(ctx, s, idem.Result{}); !errors.Is(err, idem.ErrLeaseLost) { // lease lost
				t.Fatalf("stale complete: %v", err)
			}
			if c := claim(t, l, idem.Op{Key: "p", Fingerprint: "f", Stale: idem.StalePark}); c.Outcome != idem.Parked {
				t.Fatalf("park: %v", c.Outcome)
			}
			_ = p
			if _, err := l.Resolve(ctx, "", "p", idem.Resolution{As: idemtype.StateReleased}); err != nil {
				t.Fatal(err)
			}

			b.clock.add(2 * time.Minute) // "a" past retention, inside its tombstone window
			if _, err := l.Prune(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Claim(ctx, idem.Op{Key: "a", Fingerprint: "f"}); !errors.Is(err, idem.ErrExpired) { // expired
				t.Fatalf("late replay: %v", err)
			}

			want := fmt.Sprintf(`
# HELP idem_claims_total Claims by outcome: acquired, reclaimed, replay, in_flight, mismatch, parked, expired, error.
# TYPE idem_claims_total counter
idem_claims_total{driver=%[1]q,face="library",outcome="acquired"} 3
idem_claims_total{driver=%[1]q,face="library",outcome="expired"} 1
idem_claims_total{driver=%[1]q,face="library",outcome="in_flight"} 1
idem_claims_total{driver=%[1]q,face="library",outcome="mismatch"} 1
idem_claims_total{driver=%[1]q,face="library",outcome="parked"} 1
idem_claims_total{driver=%[1]q,face="library",outcome="reclaimed"} 1
idem_claims_total{driver=%[1]q,face="library",outcome="replay"} 1
# HELP idem_duplicates_prevented_total Claims that did not run the operation again: replays of a finished key plus in-flight rejections.
# TYPE idem_duplicates_prevented_total counter
idem_duplicates_prevented_total{driver=%[1]q,face="library"} 2
# HELP idem_expired_replays_total Claims of a key past retention whose tombstone was still kept: late retries, detected and refused.
# TYPE idem_expired_replays_total counter
idem_expired_replays_total{driver=%[1]q,face="library"} 1
# HELP idem_leases_lost_total Fenced writes (complete, fail, release, heartbeat) refused because the holder had lost its lease.
# TYPE idem_leases_lost_total counter
idem_leases_lost_total{driver=%[1]q,face="library"} 1
# HELP idem_reconciliations_total Decisions about stale or parked claims, by who decided (reconciler, operator) and verdict (done, failed, not_done, unknown, error).
# TYPE idem_reconciliations_total counter
idem_reconciliations_total{by="operator",driver=%[1]q,face="library",verdict="not_done"} 1
# HELP idem_prune_tombstoned_total Completed records past retention whose stored result was dropped, leaving a tombstone.
# TYPE idem_prune_tombstoned_total counter
idem_prune_tombstoned_total{driver=%[1]q} 1
# HELP idem_claims_in_progress Records in progress (live or stale), counted in the database at scrape time.
# TYPE idem_claims_in_progress gauge
idem_claims_in_progress{driver=%[1]q} 1
# HELP idem_claims_stale Records in progress whose lease has ended, counted at scrape time.
# TYPE idem_claims_stale gauge
idem_claims_stale{driver=%[1]q} 1
# HELP idem_claims_parked Records parked for an operator or a reconciler, counted at scrape time.
# TYPE idem_claims_parked gauge
idem_claims_parked{driver=%[1]q} 0
`, driver)
			names := []string{"idem_claims_total", "idem_duplicates_prevented_total", "idem_expired_replays_total",
				"idem_leases_lost_total", "idem_reconciliations_total", "idem_prune_tombstoned_total",
				"idem_claims_in_progress", "idem_claims_stale", "idem_claims_parked"}
			if err := testutil.CollectAndCompare(b.m, strings.NewReader(want), names...); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(b.m, "idem_claim_duration_seconds"); n != 7 {
				t.Errorf("claim duration series: %d, want one per outcome (7)", n)
			}
			if n := testutil.CollectAndCount(b.m, "idem_complete_duration_seconds"); n != 1 {
				t.Errorf("complete duration series: %d, want 1 (succeeded)", n)
			}

			tot := b.m.Totals()
			if tot.DuplicatesPrevented != 2 || tot.Mismatches != 1 || tot.Reclaims != 1 || tot.ExpiredReplays != 1 ||
				tot.LeasesLost != 1 || tot.ParkedClaims != 1 || tot.Reconciliations != 1 || tot.PruneTombstoned != 1 {
				t.Errorf("totals: %+v", tot)
			}
		})
	}
}

func TestMetricNamesFollowConventions(t *testing.T) {
	t.Parallel()
	m := metrics.New("sqlite")
	obs := m.Observer()
	// Touch every vector so that the linter sees a series of each.
	obs(context.Background(), idem.Event{Kind: idem.EventClaim, Outcome: idem.Replay})
	obs(context.Background(), idem.Event{Kind: idem.EventFinish, State: idemtype.StateSucceeded})
	obs(context.Background(), idem.Event{Kind: idem.EventFinish, Err: errors.New("disk")})
	obs(context.Background(), idem.Event{Kind: idem.EventLeaseLost})
	obs(context.Background(), idem.Event{Kind: idem.EventReconcile, Verdict: idem.VerdictDone})
	obs(context.Background(), idem.Event{Kind: idem.EventClaim, Err: idem.ErrExpired})
	obs(context.Background(), idem.Event{Kind: idem.EventStep, Step: "charge", StepOutcome: idem.StepFound})
	m.GatewayAdded(time.Millisecond)
	m.JobTransition("email", "available", "running")
	m.JobRun("email", "succeeded", time.Second)
	m.OutboxDelivery("delivered")
	m.ChunkRetry(metrics.FaceOutbox)
	m.QueueDepthFrom(func(context.Context) (map[string]int64, error) { return map[string]int64{"email": 3}, nil })
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather (pedantic): %v", err)
	}
}

func TestFacesAndExtensionPoints(t *testing.T) {
	t.Parallel()
	m := metrics.New("postgres")
	m.FaceObserver(metrics.FaceGateway)(context.Background(), idem.Event{Kind: idem.EventClaim, Outcome: idem.InFlight})
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventClaim, Outcome: idem.Acquired})
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventClaim, Err: errors.New("connection reset")})
	m.FaceObserver(metrics.FaceJobs)(context.Background(), idem.Event{Kind: idem.EventReconcile, Err: errors.New("lookup failed")})
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventResolve, State: idemtype.StateSucceeded})
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventResolve, State: idemtype.StateFailed, Err: idem.ErrLiveLease})
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventResolve, State: idemtype.StateInProgress, Step: "charge", Verdict: idem.VerdictNotDone}) // ResolveStep
	m.Observer()(context.Background(), idem.Event{Kind: idem.EventPrune, Tombstoned: 4, Deleted: 2})
	m.JobTransition("email", "running", "discarded")
	m.JobTransition("email", "running", "discarded")
	m.OutboxDelivery("retry")
	m.ChunkRetry(metrics.FaceOutbox)
	m.QueueDepthFrom(func(context.Context) (map[string]int64, error) {
		return map[string]int64{"email": 3, "sms": 0}, nil
	})

	want := `
# HELP idem_claims_total Claims by outcome: acquired, reclaimed, replay, in_flight, mismatch, parked, expired, error.
# TYPE idem_claims_total counter
idem_claims_total{driver="postgres",face="gateway",outcome="in_flight"} 1
idem_claims_total{driver="postgres",face="library",outcome="acquired"} 1
idem_claims_total{driver="postgres",face="library",outcome="error"} 1
# HELP idem_duplicates_prevented_total Claims that did not run the operation again: replays of a finished key plus in-flight rejections.
# TYPE idem_duplicates_prevented_total counter
idem_duplicates_prevented_total{driver="postgres",face="gateway"} 1
# HELP idem_errors_total Ledger operations that returned an error other than a claim conflict, by operation.
# TYPE idem_errors_total counter
idem_errors_total{driver="postgres",face="library",op="claim"} 1
idem_errors_total{driver="postgres",face="library",op="resolve"} 1
# HELP idem_reconciliations_total Decisions about stale or parked claims, by who decided (reconciler, operator) and verdict (done, failed, not_done, unknown, error).
# TYPE idem_reconciliations_total counter
idem_reconciliations_total{by="operator",driver="postgres",face="library",verdict="done"} 1
idem_reconciliations_total{by="operator",driver="postgres",face="library",verdict="not_done"} 1
idem_reconciliations_total{by="reconciler",driver="postgres",face="jobs",verdict="error"} 1
# HELP idem_prune_deleted_total Rows deleted by pruning: tombstones past their window and long-released keys.
# TYPE idem_prune_deleted_total counter
idem_prune_deleted_total{driver="postgres"} 2
# HELP idem_prune_batches_total Prune batches run.
# TYPE idem_prune_batches_total counter
idem_prune_batches_total{driver="postgres"} 1
# HELP idem_job_transitions_total Jobs moving between states, by queue.
# TYPE idem_job_transitions_total counter
idem_job_transitions_total{driver="postgres",from="running",queue="email",to="discarded"} 2
# HELP idem_outbox_deliveries_total Outbox delivery attempts, by outcome (delivered, retry, failed, dead).
# TYPE idem_outbox_deliveries_total counter
idem_outbox_deliveries_total{driver="postgres",outcome="retry"} 1
# HELP idem_chunk_retries_total Fan-out chunks sent again after a failure.
# TYPE idem_chunk_retries_total counter
idem_chunk_retries_total{driver="postgres",face="outbox"} 1
# HELP idem_queue_depth Jobs waiting, by queue, counted at scrape time.
# TYPE idem_queue_depth gauge
idem_queue_depth{driver="postgres",queue="email"} 3
idem_queue_depth{driver="postgres",queue="sms"} 0
`
	names := []string{"idem_claims_total", "idem_duplicates_prevented_total", "idem_errors_total",
		"idem_reconciliations_total", "idem_prune_deleted_total", "idem_prune_batches_total", "idem_job_transitions_total",
		"idem_outbox_deliveries_total", "idem_chunk_retries_total", "idem_queue_depth"}
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// slowCounter blocks until its context ends, like a database that hangs.
type slowCounter struct{ calls chan struct{} }

func (s slowCounter) Count(ctx context.Context, limit int) (idemtype.OpenCounts, error) {
	s.calls <- struct{}{}
	<-ctx.Done()
	return idemtype.OpenCounts{}, ctx.Err()
}

func TestGaugesLeftOutWhenTheCountFails(t *testing.T) {
	t.Parallel()
	m := metrics.New("sqlite")
	sc := slowCounter{calls: make(chan struct{}, 1)}
	m.CountFrom(sc, &metrics.CountOptions{Timeout: 10 * time.Millisecond})
	m.QueueDepthFrom(func(context.Context) (map[string]int64, error) { return nil, errors.New("no jobs table") })
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather() // one scrape: both counts fail
	if err != nil {
		t.Fatal(err)
	}
	<-sc.calls
	for _, mf := range mfs {
		switch mf.GetName() {
		case "idem_claims_in_progress", "idem_claims_stale", "idem_claims_parked", "idem_queue_depth":
			t.Errorf("%s exported after a failed count", mf.GetName())
		case "idem_count_errors_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 2 {
				t.Errorf("idem_count_errors_total = %v, want 2", v)
			}
		}
	}
}

type limitCounter struct{ got chan int }

func (l limitCounter) Count(ctx context.Context, limit int) (idemtype.OpenCounts, error) {
	l.got <- limit
	return idemtype.OpenCounts{InProgress: int64(limit)}, nil
}

func TestCountIsBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New("sqlite")
	lc := limitCounter{got: make(chan int, 2)}
	m.CountFrom(lc, nil)
	testutil.CollectAndCount(m)
	if got := <-lc.got; got != metrics.DefaultCountLimit {
		t.Errorf("default limit %d, want %d", got, metrics.DefaultCountLimit)
	}
	m.CountFrom(lc, &metrics.CountOptions{Limit: 7})
	testutil.CollectAndCount(m)
	if got := <-lc.got; got != 7 {
		t.Errorf("limit %d, want 7", got)
	}
}
