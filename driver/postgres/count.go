package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

var _ driver.Counter = (*Driver)(nil)

// CountOpen counts in one statement. In-progress and stale counts use the
// partial index on lease_until; parked has no index and scans, stopped
// early by limit (LIMIT NULL is no limit).
func (d *Driver) CountOpen(ctx context.Context, limit int) (idemtype.OpenCounts, error) {
	lim := sql.NullInt64{Int64: int64(limit), Valid: limit > 0}
	var c idemtype.OpenCounts
	err := d.ex.QueryRow(ctx, clockCTE+`SELECT
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' AND lease_until <= `+clockNow+` LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'parked' LIMIT $2::bigint) s)`,
		d.clock(), lim).Scan(&c.InProgress, &c.Stale, &c.Parked)
	if err != nil {
		return c, fmt.Errorf("postgres: count: %w", err)
	}
	return c, nil
}

// CountPrunable mirrors the predicates of Prune, bounded by clockNow as
// Prune's are so that the windows bound the index scans.
func (d *Driver) CountPrunable(ctx context.Context) (idemtype.PruneCounts, error) {
	var r idemtype.PruneCounts
	err := d.ex.QueryRow(ctx, clockCTE+`SELECT
	(SELECT count(*) FROM idem_keys WHERE state IN ('succeeded', 'failed') AND expires_at <= `+clockNow+`),
	(SELECT count(*) FROM idem_keys WHERE (state IN ('succeeded', 'failed', 'tombstone') AND tombstone_until <= `+clockNow+`)
		OR (state = 'released' AND updated_at + retention_ms`+msInterval+` <= `+clockNow+`))`,
		d.clock()).Scan(&r.Tombstoned, &r.Deleted)
	if err != nil {
		return r, fmt.Errorf("postgres: count prunable: %w", err)
	}
	return r, nil
}
