package jobs

import (
	"context"
	"log/slog"
	"time"
)

// pruneBatch bounds one delete of completed jobs.
const pruneBatch = 1000

// pruneLoop deletes completed jobs older than Config.Retention, a batch at
// a time, about every tenth of the retention (at least every minute, at
// most every hour). Dead jobs are never pruned.
func (c *Client) pruneLoop(ctx context.Context) {
	every := min(max(c.cfg.Retention/10, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.Prune(ctx); err != nil && ctx.Err() == nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "pruning completed jobs failed", slog.String("error", err.Error()))
		}
	}
}

// Prune deletes completed and cancelled jobs older than Config.Retention (nothing if it
// is -1), in batches, and returns how many. A started client runs it on
// its own.
func (c *Client) Prune(ctx context.Context) (int, error) {
	if c.cfg.Retention < 0 {
		return 0, nil
	}
	total := 0
	for {
		n, err := c.drv.PruneJobs(ctx, c.cfg.Retention, pruneBatch)
		total += n
		if err != nil || n < pruneBatch {
			if total > 0 {
				c.log.LogAttrs(ctx, slog.LevelDebug, "pruned completed jobs", slog.Int("deleted", total))
			}
			return total, err
		}
	}
}
