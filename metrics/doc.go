// Package metrics exports idem's Prometheus metrics.
//
// A Collector counts what the ledger does (through the idem.Observer it
// hands out), what the other faces report through its methods (gateway
// latency, job transitions, outbox deliveries, chunk retries), and, on each
// scrape, how many claims are in progress, stale or parked, read from the
// database with a bounded count under a short timeout.
//
//	m := metrics.New("sqlite")
//	prometheus.MustRegister(m)
//	l, err := dburl.Open(ctx, url, &idem.Options{Observer: m.Observer()})
//	m.CountFrom(l, nil) // gauges from the database on every scrape
//
// Every series carries a constant driver label and, where the event comes
// from one face of idem, a face label (library, http, gateway, jobs,
// outbox, inbox). Names follow the Prometheus conventions: counters end in
// _total, durations are histograms in seconds.
//
// # Extension points
//
// The methods for the jobs and outbox faces take plain strings and
// durations, so those packages can accept a small interface of their own
// (say, interface{ JobTransition(queue, from, to string) }) that
// *Collector satisfies, without importing this package. QueueDepthFrom
// plugs a queue-depth count into the scrape the same way CountFrom plugs in
// the ledger's.
package metrics
