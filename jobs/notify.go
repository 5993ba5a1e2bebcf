package jobs

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/idemdev/idem/driver"
)

// notifyEvery is how often one client notifies one queue at most. Workers
// woken by a notice keep claiming while they find jobs, so a burst of
// enqueues needs one notice, not one each.
const notifyEvery = 100 * time.Millisecond

// notifyLimiter remembers when each queue was last notified.
type notifyLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// take returns the queues that may be notified now, and marks them.
func (l *notifyLimiter) take(queues []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	now := time.Now()
	var out []string
	for _, q := range queues {
		if slices.Contains(out, q) || now.Sub(l.last[q]) < notifyEvery {
			continue
		}
		l.last[q] = now
		out = append(out, q)
	}
	return out
}

// announce wakes this client's own producers for queues that got due jobs,
// and notifies other processes (PostgreSQL). Inside the caller's
// transaction (q is not driver.Shared) the notice goes out at commit, and a failed
// notice is returned, since on PostgreSQL it aborts that transaction.
// Outside one the jobs are already committed: a lost notice costs at most
// one poll interval, so it is only logged.
func (c *Client) announce(ctx context.Context, q driver.Executor, queues []string) error {
	for _, name := range queues {
		if p := c.producers[name]; p != nil {
			signal(p.wake)
		}
	}
	send := c.notify.take(queues)
	if len(send) == 0 {
		return nil
	}
	err := c.drv.NotifyJobs(ctx, q, send)
	if err != nil && q == driver.Shared {
		c.log.LogAttrs(ctx, slog.LevelWarn, "notify failed; workers will find the jobs by polling",
			slog.Any("queues", send), slog.String("error", err.Error()))
		return nil
	}
	return err
}

// listen keeps a LISTEN connection open where the database has one, waking
// producers on notices, and reconnects with backoff when it fails. Polling
// goes on meanwhile, so a lost connection delays jobs by at most
// PollInterval.
func (c *Client) listen(ctx context.Context) {
	backoff := time.Second
	for {
		err := c.drv.ListenJobs(ctx, func() {
			c.listening.Store(true)
			backoff = time.Second
		}, func(queue string) {
			if p := c.producers[queue]; p != nil {
				signal(p.wake)
			}
		})
		c.listening.Store(false)
		if errors.Is(err, errors.ErrUnsupported) || ctx.Err() != nil {
			return
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "listen failed; polling until it is back", slog.String("error", err.Error()),
			slog.Duration("retry_in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}
