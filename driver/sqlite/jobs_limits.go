package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// claimLimited claims for a queue with a global concurrency limit or a rate
// limit inside tx, the claim's BEGIN IMMEDIATE transaction: SQLite's write
// lock serializes it with every other claim, in any process, so the count
// of running jobs it reads cannot change before it commits.
func (d *Driver) claimLimited(ctx context.Context, tx *wtx, now int64, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	if p.RescueLimit > 0 {
		if _, err := tx.Exec(ctx, `UPDATE idem_jobs SET
	state = CASE WHEN attempt < max_attempts THEN 'available' ELSE 'dead' END,
	finalized_at = CASE WHEN attempt < max_attempts THEN NULL ELSE ?1 END,
	run_at = ?1, lease_until = NULL, updated_at = ?1,
	errors = `+appendError(`'lease expired: worker ' || worker || ' stopped heartbeating'`)+`
	WHERE id IN (SELECT id FROM idem_jobs WHERE state = 'running' AND queue = ?2 AND lease_until <= ?1
		ORDER BY lease_until LIMIT ?3 + 0)`, now, p.Queue, p.RescueLimit); err != nil {
			return nil, fmt.Errorf("sqlite: rescue jobs: %w", err)
		}
	}
	limit := p.Limit
	var window int64
	if p.Rate > 0 {
		window = now / max(p.RateInterval.Milliseconds(), 1)
		var used int
		err := tx.QueryRow(ctx, `SELECT claimed FROM idem_job_rates WHERE queue = ? AND window_start = ?`, p.Queue, window).Scan(&used)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlite: claim jobs: read rate: %w", err)
		}
		limit = min(limit, p.Rate-used)
	}
	if limit <= 0 {
		return nil, nil
	}
	conc := p.Concurrency
	if conc <= 0 {
		conc = 1 << 30
	}
	rows, err := tx.Query(ctx, `WITH
run AS (
	SELECT CASE WHEN ?7 THEN coalesce(partition_key, '') ELSE '' END AS part, count(*) AS n
	FROM idem_jobs WHERE state = 'running' AND queue = ?5 AND lease_until > ?1 GROUP BY 1),
cand AS (
	SELECT id, priority, run_at, CASE WHEN ?7 THEN coalesce(partition_key, '') ELSE '' END AS part
	FROM idem_jobs WHERE state = 'available' AND queue = ?5 AND run_at <= ?1
	ORDER BY priority, run_at, id LIMIT ?9 + 0),
ranked AS (
	SELECT cand.id, cand.priority, cand.run_at,
		row_number() OVER (PARTITION BY cand.part ORDER BY cand.priority, cand.run_at, cand.id) + coalesce(run.n, 0) AS pos
	FROM cand LEFT JOIN run ON run.part = cand.part)
UPDATE idem_jobs SET state = 'running', attempt = attempt + 1,
	lease_id = ?2, lease_until = ?1 + ?3, worker = ?4, attempted_at = ?1, updated_at = ?1
	WHERE id IN (SELECT id FROM ranked WHERE pos <= ?8 ORDER BY priority, run_at, id LIMIT ?6 + 0)
	RETURNING `+claimCols, now, p.LeaseID, ms(p.Lease), p.Worker, p.Queue, limit, p.PerPartition, conc, max(limit*16, 1000))
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	out, err := scanClaimed(rows, now, p)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	if p.Rate > 0 && len(out) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO idem_job_rates (queue, window_start, claimed) VALUES (?1, ?2, ?3)
	ON CONFLICT (queue) DO UPDATE SET claimed = CASE WHEN window_start = excluded.window_start
		THEN claimed + excluded.claimed ELSE excluded.claimed END, window_start = excluded.window_start`,
			p.Queue, window, len(out)); err != nil {
			return nil, fmt.Errorf("sqlite: claim jobs: count rate: %w", err)
		}
	}
	sortClaimed(out)
	return out, nil
}

// fastInsertRows bounds one multi-row INSERT: 12 parameters a row stay
// under SQLite's 32,766 bound variables.
const fastInsertRows = 500

// InsertJobsFast inserts jobs with multi-row INSERTs in one BEGIN
// IMMEDIATE transaction. Ids are given in insert order (AUTOINCREMENT), so
// the sorted ids of a statement are its rows' in order.
func (d *Driver) InsertJobsFast(ctx context.Context, jobs []driver.JobInsert) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	for i, j := range jobs {
		if j.UniqueKey != "" {
			return nil, fmt.Errorf("sqlite: insert jobs fast: job %d has a unique key; the fast path cannot return duplicates", i)
		}
	}
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: insert jobs fast: %w", err)
	}
	defer tx.Rollback()
	now := d.nowMS()
	ids := make([]int64, 0, len(jobs))
	const cols = `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at, priority, metadata, partition_key) VALUES `
	var b strings.Builder
	for start := 0; start < len(jobs); start += fastInsertRows {
		chunk := jobs[start:min(start+fastInsertRows, len(jobs))]
		b.Reset()
		b.WriteString(cols)
		args := make([]any, 0, len(chunk)*9)
		for i, j := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`(?, ?, ?, 'available', ?, ?, ?, ?, ?, ?, ?)`)
			runAt := now + ms(j.Delay)
			if !j.RunAt.IsZero() {
				runAt = j.RunAt.UnixMilli()
			}
			a := j.Args
			if a == nil {
				a = []byte{}
			}
			args = append(args, j.Queue, j.Kind, a, j.MaxAttempts, runAt, now, now, j.Priority,
				driver.NullIfEmpty(string(j.Metadata)), driver.NullIfEmpty(j.PartitionKey))
		}
		b.WriteString(` RETURNING id`)
		rows, err := tx.Query(ctx, b.String(), args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: insert jobs fast: %w", err)
		}
		got, err := driver.ScanAll(rows, func(r driver.Row) (int64, error) {
			var id int64
			err := r.Scan(&id)
			return id, err
		})
		if err != nil {
			return nil, fmt.Errorf("sqlite: insert jobs fast: %w", err)
		}
		if len(got) != len(chunk) {
			return nil, fmt.Errorf("sqlite: insert jobs fast: %d ids for %d jobs", len(got), len(chunk))
		}
		slices.Sort(got)
		ids = append(ids, got...)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: insert jobs fast: %w", err)
	}
	return ids, nil
}
