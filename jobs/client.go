package jobs

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
)

// Client enqueues jobs and, once started, works the queues that
// Config.Queues gives workers. It is safe for concurrent use; any number of
// clients in any number of processes may share one database.
type Client struct {
	drv driver.Driver
	cfg Config
	log *slog.Logger

	producers map[string]*producer
	notify    notifyLimiter
	finisher  *finisher
	listening atomic.Bool // PostgreSQL LISTEN is up: idle queues need not poll fast

	mu       sync.Mutex
	started  bool
	stopping bool
	stop     chan struct{}   // closed by Stop: no more claims
	workCtx  context.Context // parent of every job's context
	bgCtx    context.Context // workCtx without its cancel: for the writes that end a job
	cancel   context.CancelCauseFunc
	bgCancel context.CancelFunc // listener and pruner
	fetchers sync.WaitGroup     // producers
	bg       sync.WaitGroup     // listener, pruner
	execs    sync.WaitGroup     // running jobs
	running  map[*execution]struct{}

	events hub // subscriptions (events.go)
}

// New makes a client on the ledger's database. It does not start working;
// see Start. The ledger must stay open while the client is used.
func New(l *idem.Ledger, cfg *Config) (*Client, error) {
	if l == nil {
		return nil, inputErr("ledger", "must not be nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cl := &Client{
		drv:       l.Driver(),
		cfg:       c,
		log:       c.Logger,
		producers: map[string]*producer{},
		running:   map[*execution]struct{}{},
	}
	for name, q := range c.Queues {
		if q.MaxWorkers > 0 {
			cl.producers[name] = newProducer(cl, name, q.MaxWorkers)
		}
	}
	return cl, nil
}

// DB is a database/sql handle on the client's database (Ledger.DB), for
// the transactions passed to EnqueueTx and CompleteTx; any transaction of
// the application's on the same database works too (see idem.Tx).
func (c *Client) DB() *sql.DB { return c.drv.DB() }

// ID is the client's name in job rows and logs.
func (c *Client) ID() string { return c.cfg.ID }

// Start begins working every queue with MaxWorkers > 0, in the background,
// until Stop. Values of ctx reach every job's context; cancelling ctx stops
// the client without waiting for jobs (as Stop with an expired context).
func (c *Client) Start(ctx context.Context) error {
	if c.cfg.Workers == nil {
		return inputErr("workers", "is nil: this client can only enqueue")
	}
	if len(c.producers) == 0 {
		return inputErr("queues", "no queue has MaxWorkers > 0: nothing to work")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("jobs: client already started")
	}
	c.started = true
	c.stop = make(chan struct{})
	c.workCtx, c.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	c.bgCtx = context.WithoutCancel(c.workCtx)
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	c.bgCancel = bgCancel
	c.finisher = newFinisher(c.drv, c.cfg.FetchCooldown)
	for _, p := range c.producers {
		c.fetchers.Go(func() { p.run(c.stop) })
	}
	c.bg.Go(func() { c.listen(bgCtx) })
	started := time.Now() // RunOnStart's period is the one Start was called in
	for _, pj := range c.cfg.PeriodicJobs {
		c.bg.Go(func() { c.periodicLoop(bgCtx, c.stop, pj, started) })
	}
	if c.cfg.Retention > 0 {
		c.bg.Go(func() { c.pruneLoop(bgCtx) })
	}
	go func() {
		select {
		case <-ctx.Done():
			c.Stop(ctx)
		case <-c.stop:
		}
	}()
	return nil
}

// Stop stops claiming and waits for running jobs to finish, until ctx ends.
// Then it cancels the jobs still running (their context's cause is
// ErrStopped) and releases them at once, fenced, so that another worker can
// take them without waiting for their leases; it returns ctx's error. A
// handler that ignores its context may still be running when Stop returns;
// its completion will fail with ErrLeaseLost. Released jobs keep the
// attempt they used.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	if !c.stopping {
		c.stopping = true
		close(c.stop)
	}
	c.mu.Unlock()

	// Producers leave promptly (at most one claim in flight), and only then
	// is the set of running jobs final.
	c.fetchers.Wait()
	done := make(chan struct{})
	go func() {
		c.execs.Wait()
		c.finisher.close()
		c.bgCancel()
		c.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	c.cancel(ErrStopped)
	c.releaseRunning()
	c.bgCancel()
	return ctx.Err()
}

// releaseRunning hands every running job back to the queue, fenced.
func (c *Client) releaseRunning() {
	c.mu.Lock()
	exs := make([]*execution, 0, len(c.running))
	for ex := range c.running {
		exs = append(exs, ex)
	}
	c.mu.Unlock()
	for _, ex := range exs {
		if ex.ended.Swap(true) {
			continue // its executor is writing the end already
		}
		ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
		ex.release(ctx)
		cancel()
	}
}

func (c *Client) track(ex *execution) {
	c.mu.Lock()
	c.running[ex] = struct{}{}
	c.mu.Unlock()
}

func (c *Client) untrack(ex *execution) {
	c.mu.Lock()
	delete(c.running, ex)
	c.mu.Unlock()
}

// sleep waits d, or until stop closes; it reports whether d passed.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
