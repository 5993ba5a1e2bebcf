package outbox

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
)

// Defaults for a zero Config field.
const (
	DefaultQueue   = "outbox"
	DefaultWorkers = 10
	DefaultTimeout = 30 * time.Second
)

// Config configures an Outbox. A nil *Config means all defaults.
type Config struct {
	// Queue is the jobs queue the deliveries live on. Default "outbox".
	Queue string
	// Workers is how many deliveries this process's relay makes at once.
	// Default 10.
	Workers int
	// ChunkSize is the fan-out chunk size for messages without one.
	// Default 500.
	ChunkSize int
	// Client makes the HTTP requests. Default: a client with Timeout.
	Client *http.Client
	// Timeout bounds one delivery attempt. Default 30s.
	Timeout time.Duration
	// MaxBodyBytes bounds a delivery's stored form (body, headers, URL).
	// Default 1 MiB.
	MaxBodyBytes int
	// Lease, MaxAttempts, Backoff, PollInterval, Retention and Logger are
	// passed to the jobs client; see jobs.Config. Retention is how long a
	// delivered message's ID keeps refusing a second Add.
	Lease        time.Duration
	MaxAttempts  int
	Backoff      func(attempt int) time.Duration
	PollInterval time.Duration
	Retention    time.Duration
	Logger       *slog.Logger
	// Publisher, when set, delivers every message to a broker instead of
	// over HTTP (Client is then unused), and a message's URL may be any
	// destination the publisher understands, or empty.
	Publisher Publisher
	// Metrics receives delivery outcomes, chunk retries, and the job
	// transitions and run times of the deliveries (queue Queue): pass a
	// *metrics.Collector. Default none.
	Metrics Metrics
}

// Outbox adds messages inside business transactions and, once started,
// relays them.
type Outbox struct {
	jobs    *jobs.Client
	queue   string
	chunk   int
	client  *http.Client
	log     *slog.Logger
	metrics Metrics
	pub     Publisher
}

// New makes an outbox on the ledger's database.
func New(l *idem.Ledger, cfg *Config) (*Outbox, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Queue = cmp.Or(c.Queue, DefaultQueue)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.ChunkSize = cmp.Or(c.ChunkSize, DefaultChunkSize)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout}
	}
	switch {
	case c.Workers < 1:
		return nil, inputErr("workers", "%d must be positive", c.Workers)
	case c.ChunkSize < 1 || c.ChunkSize > MaxChunkSize:
		return nil, inputErr("chunk size", "%d is outside [1, %d]", c.ChunkSize, MaxChunkSize)
	case c.Timeout < 0:
		return nil, inputErr("timeout", "%v must not be negative", c.Timeout)
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	o := &Outbox{queue: c.Queue, chunk: c.ChunkSize, client: c.Client, log: c.Logger, metrics: c.Metrics, pub: c.Publisher}
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, &relay{o: o, timeout: c.Timeout})
	jc, err := jobs.New(l, &jobs.Config{
		Queues:  map[string]jobs.QueueConfig{c.Queue: {MaxWorkers: c.Workers}},
		Workers: ws, Lease: c.Lease, MaxAttempts: c.MaxAttempts, Backoff: c.Backoff,
		PollInterval: c.PollInterval, Retention: c.Retention, MaxArgsBytes: c.MaxBodyBytes, Logger: c.Logger,
		Metrics: c.Metrics,
	})
	if err != nil {
		return nil, err
	}
	o.jobs = jc
	return o, nil
}

// DB is the pool for the business transactions passed to Add.
func (o *Outbox) DB() *sql.DB { return o.jobs.DB() }

// Jobs is the jobs client under the outbox, for inspecting and requeueing
// dead deliveries.
func (o *Outbox) Jobs() *jobs.Client { return o.jobs }

// Add puts m in the outbox inside tx: the message exists if and only if tx
// commits. It returns the message ID (generated if m.ID is empty). If a
// message with the same ID is already there (a retried business
// transaction), Add does nothing and returns its ID, unless its content
// differs: then it returns an error matching idem.ErrMismatch.
func (o *Outbox) Add(ctx context.Context, tx idem.Tx, m Message) (string, error) {
	if tx == nil {
		return "", inputErr("tx", "must not be nil: the message must commit with the business change")
	}
	ds, id, err := m.deliveries(o.chunk, o.pub != nil)
	if err != nil {
		return "", err
	}
	params := make([]jobs.EnqueueParams, len(ds))
	for i, d := range ds {
		params[i] = jobs.EnqueueParams{Args: d, Opts: &jobs.EnqueueOpts{Queue: o.queue, UniqueKey: d.Key}}
	}
	res, err := o.jobs.EnqueueManyTx(ctx, tx, params)
	if err != nil {
		return "", fmt.Errorf("outbox: add %s: %w", id, err)
	}
	for i, r := range res {
		if !r.Duplicate {
			continue
		}
		want, err := json.Marshal(ds[i])
		if err != nil || !bytes.Equal(want, r.Job.Args) {
			return "", fmt.Errorf("outbox: add %s: %w: delivery %s already holds different content", id, idem.ErrMismatch, ds[i].Key)
		}
	}
	return id, nil
}

// Start runs the relay in the background until Stop.
func (o *Outbox) Start(ctx context.Context) error { return o.jobs.Start(ctx) }

// Stop stops the relay; see jobs.Client.Stop.
func (o *Outbox) Stop(ctx context.Context) error { return o.jobs.Stop(ctx) }
