package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Faces of idem, the values of the face label.
const (
	FaceLibrary = "library" // the ledger used directly (Do, Claim)
	FaceHTTP    = "http"    // idemhttp middleware
	FaceGateway = "gateway" // idem serve
	FaceJobs    = "jobs"
	FaceOutbox  = "outbox"
	FaceInbox   = "inbox"
)

// Histogram buckets, in seconds. A claim is one or two small writes; a job
// is whatever the user's work is.
var (
	dbBuckets  = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	jobBuckets = prometheus.ExponentialBuckets(.01, 4, 10) // 10ms … ~44min
)

// Collector is a prometheus.Collector for one ledger database. Register it
// once (prometheus.MustRegister, or a Registry of your own) and hand its
// Observer to idem.Options. All methods are safe for concurrent use and
// never block on I/O, except Collect, which runs the configured counts.
type Collector struct {
	driver string

	claims          *prometheus.CounterVec   // face, outcome
	duplicates      *prometheus.CounterVec   // face
	expiredReplays  *prometheus.CounterVec   // face
	leasesLost      *prometheus.CounterVec   // face
	finishes        *prometheus.CounterVec   // face, state
	reconciliations *prometheus.CounterVec   // face, by, verdict
	errors          *prometheus.CounterVec   // face, op
	pruneTombstoned prometheus.Counter       //
	pruneDeleted    prometheus.Counter       //
	pruneBatches    prometheus.Counter       //
	claimSeconds    *prometheus.HistogramVec // face, outcome
	completeSeconds *prometheus.HistogramVec // face, state
	gatewayAdded    prometheus.Histogram     //
	jobTransitions  *prometheus.CounterVec   // queue, from, to
	jobRunSeconds   *prometheus.HistogramVec // queue, outcome
	outboxDelivered *prometheus.CounterVec   // outcome
	chunkRetries    *prometheus.CounterVec   // face
	unrecorded      *prometheus.CounterVec   // face
	steps           *prometheus.CounterVec   // face, outcome

	gauges gauges

	totals  totals
	history *history
}

// New returns a Collector whose series carry driver=driverName ("sqlite",
// "postgres"; Ledger.Driver().Name() says which).
func New(driverName string) *Collector {
	cl := prometheus.Labels{"driver": driverName}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	c := &Collector{
		driver: driverName,
		claims: counter("idem_claims_total",
			"Claims by outcome: acquired, reclaimed, replay, in_flight, mismatch, parked, expired, error.", "face", "outcome"),
		duplicates: counter("idem_duplicates_prevented_total",
			"Claims that did not run the operation again: replays of a finished key plus in-flight rejections.", "face"),
		expiredReplays: counter("idem_expired_replays_total",
			"Claims of a key past retention whose tombstone was still kept: late retries, detected and refused.", "face"),
		leasesLost: counter("idem_leases_lost_total",
			"Fenced writes (complete, fail, release, heartbeat) refused because the holder had lost its lease.", "face"),
		finishes: counter("idem_finishes_total",
			"Held claims ended, by the state written: succeeded, failed, released, parked.", "face", "state"),
		reconciliations: counter("idem_reconciliations_total",
			"Decisions about stale or parked claims, by who decided (reconciler, operator) and verdict (done, failed, not_done, unknown, error).", "face", "by", "verdict"),
		errors: counter("idem_errors_total",
			"Ledger operations that returned an error other than a claim conflict, by operation.", "face", "op"),
		pruneTombstoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_prune_tombstoned_total", ConstLabels: cl,
			Help: "Completed records past retention whose stored result was dropped, leaving a tombstone."}),
		pruneDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_prune_deleted_total", ConstLabels: cl,
			Help: "Rows deleted by pruning: tombstones past their window and long-released keys."}),
		pruneBatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_prune_batches_total", ConstLabels: cl,
			Help: "Prune batches run."}),
		claimSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idem_claim_duration_seconds", ConstLabels: cl,
			Help: "Time to claim a key, by outcome.", Buckets: dbBuckets}, []string{"face", "outcome"}),
		completeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idem_complete_duration_seconds", ConstLabels: cl,
			Help: "Time to write the end of a held claim (complete, fail, release, park), by state.", Buckets: dbBuckets}, []string{"face", "state"}),
		gatewayAdded: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_gateway_added_latency_seconds", ConstLabels: cl,
			Help: "Time the gateway adds to a request on top of the upstream's own time.", Buckets: dbBuckets}),
		jobTransitions: counter("idem_job_transitions_total",
			"Jobs moving between states, by queue.", "queue", "from", "to"),
		jobRunSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idem_job_run_duration_seconds", ConstLabels: cl,
			Help: "Time a job's work ran, by queue and outcome.", Buckets: jobBuckets}, []string{"queue", "outcome"}),
		outboxDelivered: counter("idem_outbox_deliveries_total",
			"Outbox delivery attempts, by outcome (delivered, retry, failed, dead).", "outcome"),
		chunkRetries: counter("idem_chunk_retries_total",
			"Fan-out chunks sent again after a failure.", "face"),
		unrecorded: counter("idem_responses_unrecorded_total",
			"Responses delivered to their client but not recorded because the ledger write failed (disk full, database gone): the claim ends with its lease, then the stale-claim policy applies.", "face"),
		steps: counter("idem_steps_total",
			"Steps of multi-step runs, by outcome: ran, replayed (from a checkpoint), found (an unknown outcome the lookup found done), failed (found failed), parked (nobody could tell).", "face", "outcome"),
		history: newHistory(historyStep, historyLen, time.Now),
	}
	c.gauges.init(cl)
	return c
}

// Driver returns the driver label the collector was made with.
func (c *Collector) Driver() string { return c.driver }

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		c.claims, c.duplicates, c.expiredReplays, c.leasesLost, c.finishes, c.reconciliations, c.errors,
		c.pruneTombstoned, c.pruneDeleted, c.pruneBatches, c.claimSeconds, c.completeSeconds, c.gatewayAdded,
		c.jobTransitions, c.jobRunSeconds, c.outboxDelivered, c.chunkRetries, c.unrecorded, c.steps,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
	c.gauges.describe(ch)
}

// Collect implements prometheus.Collector. It runs the database counts
// configured with CountFrom and QueueDepthFrom, each under its timeout.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
	c.gauges.collect(ch)
}

// Totals is a snapshot of the collector's counters summed over faces, for
// dashboards (package admin) that do not scrape.
type Totals struct {
	Claims              map[string]int64 // by outcome
	DuplicatesPrevented int64
	Mismatches          int64
	Reclaims            int64
	ExpiredReplays      int64
	LeasesLost          int64
	ParkedClaims        int64 // claims answered Parked
	Reconciliations     int64
	PruneTombstoned     int64
	PruneDeleted        int64
}

type totals struct {
	mu     sync.Mutex
	claims map[string]int64

	duplicates, mismatches, reclaims, expired, leasesLost, parked, reconciliations atomic.Int64
	tombstoned, deleted                                                            atomic.Int64
}

func (t *totals) claim(outcome string) {
	t.mu.Lock()
	if t.claims == nil {
		t.claims = map[string]int64{}
	}
	t.claims[outcome]++
	t.mu.Unlock()
}

// Totals returns the counters as they are now.
func (c *Collector) Totals() Totals {
	t := &c.totals
	t.mu.Lock()
	claims := make(map[string]int64, len(t.claims))
	for k, v := range t.claims {
		claims[k] = v
	}
	t.mu.Unlock()
	return Totals{
		Claims:              claims,
		DuplicatesPrevented: t.duplicates.Load(),
		Mismatches:          t.mismatches.Load(),
		Reclaims:            t.reclaims.Load(),
		ExpiredReplays:      t.expired.Load(),
		LeasesLost:          t.leasesLost.Load(),
		ParkedClaims:        t.parked.Load(),
		Reconciliations:     t.reconciliations.Load(),
		PruneTombstoned:     t.tombstoned.Load(),
		PruneDeleted:        t.deleted.Load(),
	}
}
