package jobs

import (
	"cmp"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/idemdev/idem/internal/printable"
)

// DefaultQueue is the queue of jobs enqueued without one.
const DefaultQueue = "default"

// DefaultMaxAttempts is a job's attempt limit when neither Config nor
// EnqueueOpts sets one.
const DefaultMaxAttempts = 25

// Bounds checked by New and Enqueue: Config.Lease is at least MinLease; an
// attempt limit (Config.MaxAttempts, EnqueueOpts.MaxAttempts) is at most
// MaxAttemptLimit.
const (
	MinLease        = 100 * time.Millisecond
	MaxAttemptLimit = 1000
)

// The other defaults and bounds, documented on the Config and EnqueueOpts
// fields they apply to.
const (
	defaultMaxWorkers    = 10
	defaultLease         = 30 * time.Second
	defaultPollInterval  = time.Second
	defaultFetchCooldown = 2 * time.Millisecond
	defaultRetention     = 24 * time.Hour
	defaultMaxArgsBytes  = 1 << 20

	maxLease        = 24 * time.Hour
	maxArgsLimit    = 64 << 20
	maxQueueLen     = 64  // bytes: letters, digits, '_', '-', '.'
	maxKindLen      = 128 // bytes of UTF-8 without control characters
	maxUniqueKeyLen = 255 // bytes of UTF-8 without control characters
	maxDelay        = 10 * 366 * 24 * time.Hour
)

// Config configures a Client. A nil *Config means all defaults.
type Config struct {
	// Queues declares every queue the client enqueues to or works;
	// enqueueing to another queue is an error (ErrUnknownQueue). Default:
	// {"default": {MaxWorkers: 10}}.
	Queues map[string]QueueConfig
	// Workers holds the handlers. Nil makes an enqueue-only client; Start
	// then fails. When set, Enqueue refuses kinds it does not hold, which
	// catches a misspelt kind before it becomes a dead letter.
	Workers *Workers
	// Lease is how long a claim is trusted without a heartbeat. Workers
	// heartbeat every third of it, so a job may run for any length of time;
	// a worker that dies or pauses loses its jobs about one lease later.
	// Default 30s, at least 100ms.
	Lease time.Duration
	// MaxAttempts is the attempt limit of jobs enqueued without one. A job
	// whose last attempt fails (or whose worker dies on it) is dead-lettered.
	// Default 25, at most 1000.
	MaxAttempts int
	// Backoff is the delay before retry number attempt+1 after attempt
	// failed. Default DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// PollInterval is the longest an idle queue goes without looking for
	// due jobs. SQLite polls with backoff from a few milliseconds up to it;
	// on PostgreSQL LISTEN/NOTIFY wakes workers at once and polling only
	// catches scheduled jobs and retries. It also bounds how long a job of
	// a dead worker stays running after its lease: lease + PollInterval.
	// Default 1s.
	PollInterval time.Duration
	// FetchCooldown is the least time between two claims of one queue while
	// jobs keep coming, so that claims gather freed worker slots into
	// batches. Default 2ms (or PollInterval, if shorter).
	FetchCooldown time.Duration
	// JobTimeout, when positive, cancels a job's context after that long
	// (the attempt then fails and is retried). Default none.
	JobTimeout time.Duration
	// Retention is how long completed and cancelled jobs are kept, and so how long their
	// unique keys keep refusing duplicates, before the client prunes them.
	// Default 24h; -1 keeps them forever. Dead jobs are never pruned.
	Retention time.Duration
	// MaxArgsBytes bounds encoded arguments. Default 1 MiB, at most 64 MiB.
	MaxArgsBytes int
	// ID names this client in job rows and logs. Default host/pid/random.
	ID string
	// Logger receives one line per notable event, each carrying job_id,
	// queue, kind and attempt. Default slog.Default().
	Logger *slog.Logger
	// PeriodicJobs are enqueued once per period of their schedules by
	// whichever started client gets there first (see PeriodicJob). Only a
	// started client enqueues them.
	PeriodicJobs []PeriodicJob
	// Metrics receives job transitions and run times: pass a
	// *metrics.Collector. Default none. For idem_queue_depth, also pass
	// the client's QueueDepth to the collector's QueueDepthFrom.
	Metrics Metrics
	// EventBuffer is the channel capacity of each Subscribe: events beyond
	// it, while the subscriber is behind, are dropped. Default 1024.
	EventBuffer int
}

// QueueConfig configures one queue.
type QueueConfig struct {
	// MaxWorkers is how many of the queue's jobs this client runs at once.
	// Zero declares the queue for enqueueing only.
	MaxWorkers int
	// Limits bound the queue across every client and host (limits.go).
	Limits
}

func (cfg *Config) withDefaults() (Config, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Queues == nil {
		c.Queues = map[string]QueueConfig{DefaultQueue: {MaxWorkers: defaultMaxWorkers}}
	} else {
		c.Queues = maps.Clone(c.Queues)
	}
	c.Lease = cmp.Or(c.Lease, defaultLease)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, min(defaultFetchCooldown, c.PollInterval))
	c.Retention = cmp.Or(c.Retention, defaultRetention)
	c.MaxArgsBytes = cmp.Or(c.MaxArgsBytes, defaultMaxArgsBytes)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.EventBuffer = cmp.Or(c.EventBuffer, DefaultEventBuffer)
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
	}
	if len(c.Queues) == 0 {
		return c, inputErr("queues", "must declare at least one queue")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		if err := checkQueueName(name); err != nil {
			return c, err
		}
		if n := c.Queues[name].MaxWorkers; n < 0 || n > 10000 {
			return c, inputErr("queues", "%q: MaxWorkers %d is outside [0, 10000]", name, n)
		}
		if err := c.Queues[name].Limits.check(name); err != nil {
			return c, err
		}
	}
	if err := checkPeriodic(c.PeriodicJobs); err != nil {
		return c, err
	}
	switch {
	case c.Lease < MinLease || c.Lease > maxLease:
		return c, inputErr("lease", "%v is outside [%v, %v]", c.Lease, MinLease, maxLease)
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptLimit:
		return c, inputErr("max attempts", "%d is outside [1, %d]", c.MaxAttempts, MaxAttemptLimit)
	case c.PollInterval < time.Millisecond || c.PollInterval > time.Hour:
		return c, inputErr("poll interval", "%v is outside [1ms, 1h]", c.PollInterval)
	case c.FetchCooldown < 0 || c.FetchCooldown > c.PollInterval:
		return c, inputErr("fetch cooldown", "%v is outside [0, poll interval %v]", c.FetchCooldown, c.PollInterval)
	case c.JobTimeout < 0:
		return c, inputErr("job timeout", "%v must not be negative", c.JobTimeout)
	case c.Retention < -1:
		return c, inputErr("retention", "%v must be positive, or -1 to keep completed jobs forever", c.Retention)
	case c.EventBuffer < 0:
		return c, inputErr("event buffer", "%d must not be negative", c.EventBuffer)
	case c.MaxArgsBytes < 1 || c.MaxArgsBytes > maxArgsLimit:
		return c, inputErr("max args bytes", "%d is outside [1, %d]", c.MaxArgsBytes, maxArgsLimit)
	}
	return c, nil
}

// checkQueueName: queue names travel in NOTIFY payloads and log lines, so
// they are short and plain.
func checkQueueName(q string) error {
	if q == "" || len(q) > maxQueueLen {
		return inputErr("queue", "%q must be 1 to %d bytes", q, maxQueueLen)
	}
	for _, r := range q {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return inputErr("queue", "%q has %q; use letters, digits, '_', '-' and '.'", q, r)
		}
	}
	return nil
}

// checkText bounds kinds and unique keys.
func checkText(field, s string, maxLen int) error {
	if err := printable.Check(s, 1, maxLen); err != nil {
		return inputErr(field, "%v", err)
	}
	return nil
}

func (c *Client) knownQueues() []string {
	return slices.Sorted(maps.Keys(c.cfg.Queues))
}

func (c *Client) checkQueue(q string) error {
	if _, ok := c.cfg.Queues[q]; !ok {
		return &queueError{queue: q, known: c.knownQueues()}
	}
	return nil
}
