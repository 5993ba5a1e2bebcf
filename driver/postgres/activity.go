package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/jackc/pgx/v5"
)

var (
	_ driver.Activity     = (*Driver)(nil)
	_ driver.JobQueueAges = (*Driver)(nil)
)

// ReportActivity writes the report in one transaction of two statements.
// Records are locked with SKIP LOCKED: the report waits on no claim, so it
// can be in no deadlock with a group commit; the records it skipped are
// returned as busy.
func (d *Driver) ReportActivity(ctx context.Context, r driver.ActivityReport) ([]driver.KeyReplays, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: report activity: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if len(r.Counters) > 0 {
		names, values := make([]string, 0, len(r.Counters)), make([]int64, 0, len(r.Counters))
		for n, v := range r.Counters {
			names, values = append(names, n), append(values, v)
		}
		if _, err := tx.Exec(ctx, clockCTE+`INSERT INTO idem_counters (source, name, value, updated_at)
		SELECT $2, v.name, v.value, c.now FROM c, unnest($3::text[], $4::bigint[]) AS v(name, value)
		ON CONFLICT (source, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			d.clock(), r.Source, names, values); err != nil {
			return nil, fmt.Errorf("postgres: report activity: %w", err)
		}
	}
	// One statement per key, sent together in one round trip: each
	// reaches its record through the primary key, whatever the table's
	// size, and skips it if another transaction holds it locked.
	b := &pgx.Batch{}
	for _, k := range r.Replays {
		b.Queue(replayQuery, k.Scope, k.Key, k.N, k.Last)
	}
	var maybeBusy []driver.KeyReplays
	if b.Len() > 0 {
		res := tx.SendBatch(ctx, b)
		for _, k := range r.Replays {
			ct, err := res.Exec()
			if err != nil {
				res.Close()
				return nil, fmt.Errorf("postgres: report activity: %w", err)
			}
			if ct.RowsAffected() == 0 {
				maybeBusy = append(maybeBusy, k)
			}
		}
		if err := res.Close(); err != nil {
			return nil, fmt.Errorf("postgres: report activity: %w", err)
		}
	}
	var busy []driver.KeyReplays
	for _, k := range maybeBusy { // locked, or gone (pruned): only the locked are kept
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM idem_keys WHERE scope = $1 AND key = $2)`, k.Scope, k.Key).Scan(&exists); err != nil {
			return nil, fmt.Errorf("postgres: report activity: %w", err)
		}
		if exists {
			busy = append(busy, k)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: report activity: %w", err)
	}
	return busy, nil
}

// replayQuery adds replays to one record, unless another transaction
// holds it locked (SKIP LOCKED: a report never waits on a claim). The
// UPDATE names its row by primary key as well as by the join: joined to
// l alone, with statistics that say the table is nearly empty, it was
// planned as a scan of the whole primary key, once per record reported
// (TestWritesReadOnlyTheRowsTheyPicked).
const replayQuery = `WITH l AS (SELECT scope, key FROM idem_keys WHERE scope = $1 AND key = $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_keys k SET replays = k.replays + $3, last_replayed_at = greatest(k.last_replayed_at, $4::timestamptz)
FROM l WHERE k.scope = $1 AND k.key = $2 AND k.scope = l.scope AND k.key = l.key`

// ActivitySources reads every source's counters.
func (d *Driver) ActivitySources(ctx context.Context) ([]driver.SourceCounter, error) {
	rows, err := d.ex.Query(ctx, `SELECT source, name, value, updated_at FROM idem_counters ORDER BY source, name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: activity sources: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (driver.SourceCounter, error) {
		var c driver.SourceCounter
		return c, r.Scan(&c.Source, &c.Name, &c.Value, &c.UpdatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: activity sources: %w", err)
	}
	return out, nil
}

// CountStates counts in one statement; every count but parked's follows a
// partial index (or the primary key, for the total), and each stops at
// limit (LIMIT NULL is no limit).
func (d *Driver) CountStates(ctx context.Context, limit int) (driver.StateCounts, error) {
	lim := sql.NullInt64{Int64: int64(limit), Valid: limit > 0}
	var c driver.StateCounts
	err := d.ex.QueryRow(ctx, clockCTE+`SELECT
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state IN ('succeeded', 'failed') LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' AND lease_until <= `+clockNow+` LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'parked' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'released' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'tombstone' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys LIMIT $2::bigint) s)`,
		d.clock(), lim).Scan(&c.Completed, &c.InProgress, &c.Stale, &c.Parked, &c.Released, &c.Tombstone, &c.Total)
	if err != nil {
		return c, fmt.Errorf("postgres: count states: %w", err)
	}
	return c, nil
}

// recentQuery reads through idem_keys_updated, newest first: no sort, no
// scan (activity_test.go checks the plan).
const recentQuery = clockCTE + `SELECT scope, key, fingerprint, state, attempt, status, lease_until, updated_at, replays, last_replayed_at, c.now
	FROM idem_keys, c ORDER BY updated_at DESC LIMIT $2`

// RecentRecords reads through idem_keys_updated, newest first.
func (d *Driver) RecentRecords(ctx context.Context, limit int) ([]driver.RecentRecord, error) {
	rows, err := d.ex.Query(ctx, recentQuery, d.clock(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: recent records: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (driver.RecentRecord, error) {
		var (
			rec          driver.RecentRecord
			state        string
			lastReplayed sql.NullTime
		)
		err := r.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &state, &rec.Attempt, &rec.Status, &rec.LeaseUntil, &rec.UpdatedAt, &rec.Replays, &lastReplayed, &rec.Now)
		rec.State, rec.LastReplayedAt = idemtype.State(state), lastReplayed.Time
		return rec, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: recent records: %w", err)
	}
	return out, nil
}

// OldestAvailableJobAges reads due available jobs through the fetch index.
func (d *Driver) OldestAvailableJobAges(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := d.ex.Query(ctx, clockCTE+`SELECT queue, (extract(epoch FROM c.now - min(run_at)) * 1000)::bigint
	FROM idem_jobs, c WHERE state = 'available' AND run_at <= `+clockNow+` GROUP BY queue, c.now`, d.clock())
	if err != nil {
		return nil, fmt.Errorf("postgres: oldest jobs: %w", err)
	}
	ages, err := driver.ScanAges(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: oldest jobs: %w", err)
	}
	return ages, nil
}
