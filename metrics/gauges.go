package metrics

import (
	"cmp"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for the counts run on every scrape.
const (
	DefaultCountTimeout = 2 * time.Second
	DefaultCountLimit   = 100_000
)

// OpenCounter is what CountFrom reads on every scrape. *idem.Ledger is one.
type OpenCounter interface {
	Count(ctx context.Context, limit int) (idemtype.OpenCounts, error)
}

// QueueDepthFunc returns how many jobs wait in each queue. The jobs package
// provides one; it must honour ctx.
type QueueDepthFunc func(ctx context.Context) (map[string]int64, error)

// CountOptions bounds the counts run on every scrape. Nil means defaults.
type CountOptions struct {
	// Timeout for each count. Default 2s. A count that times out or fails
	// leaves its gauges out of that scrape (alert on absent()) and adds to
	// idem_count_errors_total.
	Timeout time.Duration
	// Limit caps each count, so a scrape of a ledger with millions of
	// stuck rows stays cheap: a gauge equal to Limit means "at least".
	// Default 100000.
	Limit int
}

type gauges struct {
	mu       sync.Mutex
	open     OpenCounter
	depth    QueueDepthFunc
	timeout  time.Duration
	limit    int
	errors   prometheus.Counter
	inProg   *prometheus.Desc
	stale    *prometheus.Desc
	parked   *prometheus.Desc
	queueLen *prometheus.Desc
}

func (g *gauges) init(cl prometheus.Labels) {
	g.timeout, g.limit = DefaultCountTimeout, DefaultCountLimit
	g.errors = prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_count_errors_total", ConstLabels: cl,
		Help: "Database counts behind the gauges that failed or timed out during a scrape."})
	g.inProg = prometheus.NewDesc("idem_claims_in_progress",
		"Records in progress (live or stale), counted in the database at scrape time.", nil, cl)
	g.stale = prometheus.NewDesc("idem_claims_stale",
		"Records in progress whose lease has ended, counted at scrape time.", nil, cl)
	g.parked = prometheus.NewDesc("idem_claims_parked",
		"Records parked for an operator or a reconciler, counted at scrape time.", nil, cl)
	g.queueLen = prometheus.NewDesc("idem_queue_depth",
		"Jobs waiting, by queue, counted at scrape time.", []string{"queue"}, cl)
}

// CountFrom makes every scrape count in-progress, stale and parked records
// through src (a *idem.Ledger), bounded by opts. Without it those gauges
// are not exported: the counters are, since they need no database.
func (c *Collector) CountFrom(src OpenCounter, opts *CountOptions) {
	var o CountOptions
	if opts != nil {
		o = *opts
	}
	g := &c.gauges
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = src
	g.timeout = cmp.Or(o.Timeout, DefaultCountTimeout)
	g.limit = cmp.Or(o.Limit, DefaultCountLimit)
}

// QueueDepthFrom makes every scrape export idem_queue_depth{queue} from f,
// under the same timeout as CountFrom. The jobs package's extension point.
func (c *Collector) QueueDepthFrom(f QueueDepthFunc) {
	c.gauges.mu.Lock()
	c.gauges.depth = f
	c.gauges.mu.Unlock()
}

func (g *gauges) describe(ch chan<- *prometheus.Desc) {
	g.errors.Describe(ch)
	ch <- g.inProg
	ch <- g.stale
	ch <- g.parked
	ch <- g.queueLen
}

func (g *gauges) collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	open, depth, timeout, limit := g.open, g.depth, g.timeout, g.limit
	g.mu.Unlock()
	if open != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		n, err := open.Count(ctx, limit)
		cancel()
		if err != nil {
			g.errors.Inc()
		} else {
			ch <- prometheus.MustNewConstMetric(g.inProg, prometheus.GaugeValue, float64(n.InProgress))
			ch <- prometheus.MustNewConstMetric(g.stale, prometheus.GaugeValue, float64(n.Stale))
			ch <- prometheus.MustNewConstMetric(g.parked, prometheus.GaugeValue, float64(n.Parked))
		}
	}
	if depth != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		m, err := depth(ctx)
		cancel()
		if err != nil {
			g.errors.Inc()
		} else {
			queues := make([]string, 0, len(m))
			for q := range m {
				queues = append(queues, q)
			}
			sort.Strings(queues)
			for _, q := range queues {
				ch <- prometheus.MustNewConstMetric(g.queueLen, prometheus.GaugeValue, float64(m[q]), q)
			}
		}
	}
	g.errors.Collect(ch)
}
