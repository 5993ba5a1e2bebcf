package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

var (
	_ driver.Activity     = (*Driver)(nil)
	_ driver.JobQueueAges = (*Driver)(nil)
)

// ReportActivity writes the report in one transaction on the writer,
// which holds the only write lock: nothing is ever busy.
func (d *Driver) ReportActivity(ctx context.Context, r driver.ActivityReport) ([]driver.KeyReplays, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: report activity: %w", err)
	}
	defer tx.Rollback()
	now := d.nowMS()
	for name, v := range r.Counters {
		if _, err := tx.Exec(ctx, `INSERT INTO idem_counters (source, name, value, updated_at) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (source, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			r.Source, name, v, now); err != nil {
			return nil, fmt.Errorf("sqlite: report activity: %w", err)
		}
	}
	if len(r.Replays) > 0 {
		type replay struct {
			Scope string `json:"s"`
			Key   string `json:"k"`
			N     int64  `json:"n"`
			At    int64  `json:"t"`
		}
		list := make([]replay, len(r.Replays))
		for i, k := range r.Replays {
			list[i] = replay{k.Scope, k.Key, k.N, k.Last.UnixMilli()}
		}
		js, err := json.Marshal(list)
		if err != nil {
			return nil, fmt.Errorf("sqlite: report activity: %w", err)
		}
		// One statement: a primary-key lookup per reported key.
		if _, err := tx.Exec(ctx, `UPDATE idem_keys SET replays = replays + v.n,
		last_replayed_at = max(coalesce(last_replayed_at, 0), v.at)
		FROM (SELECT json_extract(value, '$.s') AS scope, json_extract(value, '$.k') AS key,
			json_extract(value, '$.n') AS n, json_extract(value, '$.t') AS at FROM json_each(?1)) AS v
		WHERE idem_keys.scope = v.scope AND idem_keys.key = v.key`, string(js)); err != nil {
			return nil, fmt.Errorf("sqlite: report activity: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: report activity: %w", err)
	}
	return nil, nil
}

// ActivitySources reads every source's counters.
func (d *Driver) ActivitySources(ctx context.Context) ([]driver.SourceCounter, error) {
	rows, err := d.r.Query(ctx, `SELECT source, name, value, updated_at FROM idem_counters ORDER BY source, name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: activity sources: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (driver.SourceCounter, error) {
		var (
			c  driver.SourceCounter
			at int64
		)
		err := r.Scan(&c.Source, &c.Name, &c.Value, &at)
		c.UpdatedAt = fromMS(at)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: activity sources: %w", err)
	}
	return out, nil
}

// CountStates counts in one statement; every count but parked's follows a
// partial index (or the primary key, for the total), and each stops at
// limit.
func (d *Driver) CountStates(ctx context.Context, limit int) (driver.StateCounts, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	var c driver.StateCounts
	err := d.r.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state IN ('succeeded', 'failed') LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' AND lease_until <= ?1 LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'parked' LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'released' LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'tombstone' LIMIT ?2)),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys LIMIT ?2))`,
		d.nowMS(), limit).Scan(&c.Completed, &c.InProgress, &c.Stale, &c.Parked, &c.Released, &c.Tombstone, &c.Total)
	if err != nil {
		return c, fmt.Errorf("sqlite: count states: %w", err)
	}
	return c, nil
}

// recentQuery reads through idem_keys_updated, newest first: no sort, no
// scan (activity_test.go checks the plan).
const recentQuery = `SELECT scope, key, fingerprint, state, attempt, status, lease_until, updated_at, replays, last_replayed_at
	FROM idem_keys ORDER BY updated_at DESC LIMIT ?1`

// RecentRecords reads through idem_keys_updated, newest first.
func (d *Driver) RecentRecords(ctx context.Context, limit int) ([]driver.RecentRecord, error) {
	now := d.nowMS()
	rows, err := d.r.Query(ctx, recentQuery, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: recent records: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (driver.RecentRecord, error) {
		var (
			rec          driver.RecentRecord
			state        string
			lease, upd   int64
			lastReplayed sql.NullInt64
		)
		err := r.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &state, &rec.Attempt, &rec.Status, &lease, &upd, &rec.Replays, &lastReplayed)
		rec.State, rec.LeaseUntil, rec.UpdatedAt, rec.LastReplayedAt, rec.Now = idemtype.State(state), fromMS(lease), fromMS(upd), nullMS(lastReplayed), fromMS(now)
		return rec, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: recent records: %w", err)
	}
	return out, nil
}

// OldestAvailableJobAges reads due available jobs through the fetch index.
func (d *Driver) OldestAvailableJobAges(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := d.r.Query(ctx, `SELECT queue, ?1 - min(run_at) FROM idem_jobs WHERE state = 'available' AND run_at <= ?1 GROUP BY queue`, d.nowMS())
	if err != nil {
		return nil, fmt.Errorf("sqlite: oldest jobs: %w", err)
	}
	ages, err := driver.ScanAges(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: oldest jobs: %w", err)
	}
	return ages, nil
}
