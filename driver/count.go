package driver

import (
	"context"

	"github.com/idemdev/idem/idemtype"
)

// Counter is the read-only counting a driver offers to gauges (idem's
// metrics) and to prune dry runs. It never writes and never waits for a
// writer's lock. Drivers that cannot count need not implement it.
type Counter interface {
	// CountOpen counts in-progress, stale and parked records. Each count
	// stops at limit (limit <= 0: no limit), so that a scrape stays cheap
	// on a ledger with millions of stuck rows; a count equal to limit means
	// "at least limit".
	CountOpen(ctx context.Context, limit int) (idemtype.OpenCounts, error)
	// CountPrunable counts what Prune, called in batches until it is done,
	// would change if it ran now: completed records past retention it would
	// tombstone, and rows it would delete (tombstones past their window,
	// completed records past their window that go straight through, and
	// long-released rows).
	CountPrunable(ctx context.Context) (idemtype.PruneCounts, error)
}
