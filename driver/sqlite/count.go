package sqlite

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

var _ driver.Counter = (*Driver)(nil)

// CountOpen counts from the read pool. In-progress and stale counts use the
// partial index on lease_until; parked has no index and scans, stopped
// early by limit.
func (d *Driver) CountOpen(ctx context.Context, limit int) (idemtype.OpenCounts, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	var c idemtype.OpenCounts
	err := d.r.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' AND lease_until <= ?1 LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'parked' LIMIT ?2))`,
		d.nowMS(), limit).Scan(&c.InProgress, &c.Stale, &c.Parked)
	if err != nil {
		return c, fmt.Errorf("sqlite: count: %w", err)
	}
	return c, nil
}

// CountPrunable mirrors the predicates of Prune.
func (d *Driver) CountPrunable(ctx context.Context) (idemtype.PruneCounts, error) {
	var r idemtype.PruneCounts
	err := d.r.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM idem_keys WHERE state IN ('succeeded', 'failed') AND expires_at <= ?1),
	(SELECT count(*) FROM idem_keys WHERE (state IN ('succeeded', 'failed', 'tombstone') AND tombstone_until <= ?1)
		OR (state = 'released' AND updated_at + retention_ms <= ?1))`,
		d.nowMS()).Scan(&r.Tombstoned, &r.Deleted)
	if err != nil {
		return r, fmt.Errorf("sqlite: count prunable: %w", err)
	}
	return r, nil
}
