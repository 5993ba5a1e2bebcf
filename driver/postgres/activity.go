package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
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
	var busy []driver.KeyReplays
	if len(r.Replays) > 0 {
		n := len(r.Replays)
		scopes, keys, counts, lasts := make([]string, n), make([]string, n), make([]int64, n), make([]time.Time, n)
		for i, k := range r.Replays {
			scopes[i], keys[i], counts[i], lasts[i] = k.Scope, k.Key, k.N, k.Last
		}
		rows, err := tx.Query(ctx, `WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[]) AS v(scope, key, n, at)),
		locked AS (SELECT k.scope, k.key FROM idem_keys k JOIN v ON k.scope = v.scope AND k.key = v.key
			ORDER BY k.scope, k.key FOR UPDATE OF k SKIP LOCKED),
		upd AS (UPDATE idem_keys k SET replays = k.replays + v.n, last_replayed_at = greatest(k.last_replayed_at, v.at)
			FROM v, locked WHERE k.scope = v.scope AND k.key = v.key AND locked.scope = v.scope AND locked.key = v.key
			RETURNING k.scope, k.key)
		SELECT v.scope, v.key FROM v WHERE EXISTS (SELECT 1 FROM idem_keys k WHERE k.scope = v.scope AND k.key = v.key)
			AND NOT EXISTS (SELECT 1 FROM upd WHERE upd.scope = v.scope AND upd.key = v.key)`,
			scopes, keys, counts, lasts)
		if err != nil {
			return nil, fmt.Errorf("postgres: report activity: %w", err)
		}
		type sk struct{ scope, key string }
		skipped := map[sk]bool{}
		for rows.Next() {
			var k sk
			if err := rows.Scan(&k.scope, &k.key); err != nil {
				rows.Close()
				return nil, fmt.Errorf("postgres: report activity: %w", err)
			}
			skipped[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("postgres: report activity: %w", err)
		}
		for _, k := range r.Replays {
			if skipped[sk{k.Scope, k.Key}] {
				busy = append(busy, k)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: report activity: %w", err)
	}
	return busy, nil
}

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
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state IN ('succeeded', 'failed') AND state = 'succeeded' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state IN ('succeeded', 'failed') AND state = 'failed' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'in_progress' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys, c WHERE state = 'in_progress' AND lease_until <= c.now LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'parked' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'released' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys WHERE state = 'tombstone' LIMIT $2::bigint) s),
	(SELECT count(*) FROM (SELECT 1 FROM idem_keys LIMIT $2::bigint) s)`,
		d.clock(), lim).Scan(&c.Succeeded, &c.Failed, &c.InProgress, &c.Stale, &c.Parked, &c.Released, &c.Tombstone, &c.Total)
	if err != nil {
		return c, fmt.Errorf("postgres: count states: %w", err)
	}
	return c, nil
}

// RecentRecords reads through idem_keys_updated, newest first.
func (d *Driver) RecentRecords(ctx context.Context, limit int) ([]driver.RecentRecord, error) {
	rows, err := d.ex.Query(ctx, clockCTE+`SELECT scope, key, fingerprint, state, attempt, status, lease_until, updated_at, replays, last_replayed_at, c.now
	FROM idem_keys, c ORDER BY updated_at DESC LIMIT $2`, d.clock(), limit)
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
	rows, err := d.ex.Query(ctx, jobClock+`SELECT queue, (extract(epoch FROM c.now - min(run_at)) * 1000)::bigint
	FROM idem_jobs, c WHERE state = 'available' AND run_at <= c.now GROUP BY queue, c.now`, d.clock())
	if err != nil {
		return nil, fmt.Errorf("postgres: oldest jobs: %w", err)
	}
	type age struct {
		q  string
		ms int64
	}
	ages, err := driver.ScanAll(rows, func(r driver.Row) (age, error) {
		var a age
		return a, r.Scan(&a.q, &a.ms)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: oldest jobs: %w", err)
	}
	out := make(map[string]time.Duration, len(ages))
	for _, a := range ages {
		out[a.q] = time.Duration(a.ms) * time.Millisecond
	}
	return out, nil
}
