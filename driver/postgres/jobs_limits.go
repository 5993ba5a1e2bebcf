package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/jackc/pgx/v5"
)

// claimLimited claims for a queue with a global concurrency limit or a rate
// limit, in one transaction: an advisory lock per queue serializes the
// queue's limited claims across hosts; every statement after it sees the
// claims committed before it (READ COMMITTED takes a snapshot per
// statement) and uses one clock, read once the lock is held.
func (d *Driver) claimLimited(ctx context.Context, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim jobs: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('idem_jobs_claim:' || $2, 0))::text,
	coalesce($1::timestamptz, statement_timestamp())`, d.clock(), p.Queue).Scan(new(string), &now); err != nil {
		return nil, fmt.Errorf("postgres: claim jobs: lock queue: %w", err)
	}
	if p.RescueLimit > 0 {
		if _, err := tx.Exec(ctx, rescueJobsSQL, now, p.Queue, p.RescueLimit); err != nil {
			return nil, fmt.Errorf("postgres: rescue jobs: %w", err)
		}
	}
	limit := p.Limit
	var window int64
	if p.Rate > 0 {
		iv := max(p.RateInterval.Milliseconds(), 1)
		window = now.UnixMilli() / iv
		var used int
		err := tx.QueryRow(ctx, `SELECT claimed FROM idem_job_rates WHERE queue = $1 AND window_start = $2`, p.Queue, window).Scan(&used)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("postgres: claim jobs: read rate: %w", err)
		}
		limit = min(limit, p.Rate-used)
	}
	var out []idemtype.JobRow
	if limit > 0 {
		conc := p.Concurrency
		if conc <= 0 {
			conc = 1 << 30
		}
		rows, err := pgxExecutor{tx}.Query(ctx, claimLimitedSQL,
			now, p.Queue, limit, p.LeaseID, p.Lease.Milliseconds(), p.Worker, conc, p.PerPartition, limitScan(limit))
		if err != nil {
			return nil, fmt.Errorf("postgres: claim jobs: %w", err)
		}
		if out, err = scanClaimed(rows, p); err != nil {
			return nil, fmt.Errorf("postgres: claim jobs: %w", err)
		}
	}
	if p.Rate > 0 && len(out) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO idem_job_rates (queue, window_start, claimed) VALUES ($1, $2, $3)
	ON CONFLICT (queue) DO UPDATE SET claimed = CASE WHEN idem_job_rates.window_start = excluded.window_start
		THEN idem_job_rates.claimed + excluded.claimed ELSE excluded.claimed END, window_start = excluded.window_start`,
			p.Queue, window, len(out)); err != nil {
			return nil, fmt.Errorf("postgres: claim jobs: count rate: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: claim jobs: %w", err)
	}
	return out, nil
}

// rescueJobsSQL makes a queue's jobs whose lease ended ($3 at most)
// available again, or dead after their last attempt: claimLimited's first
// statement, the part of claimJobsSQL before its claim.
var rescueJobsSQL = clockCTE + `,
expired AS MATERIALIZED (` + expiredJobs + `)
` + rescueExpired

// claimLimitedSQL claims up to $3 due jobs of queue $2 that fit the
// queue's concurrency limit $7 (per partition when $8), looking at $9 of
// them (limitScan), for lease id $4, lease $5 ms and worker $6. Like
// claimJobsSQL it looks up by primary key each job it picked (jobByID):
// as a semi-join, the pick was read once per due job. It locks the picked
// jobs and then keeps those still available: with the state in the
// locking scan's condition, that scan could read the whole partial index
// of available jobs, once per picked job. The running jobs' count is
// materialized: inlined, it was counted again for each candidate.
var claimLimitedSQL = clockCTE + `,
run AS MATERIALIZED (
	SELECT CASE WHEN $8 THEN coalesce(partition_key, '') ELSE '' END AS part, count(*) AS n
	FROM idem_jobs, c WHERE state = 'running' AND queue = $2 AND lease_until > c.now GROUP BY 1),
cand AS (
	SELECT id, priority, run_at, CASE WHEN $8 THEN coalesce(partition_key, '') ELSE '' END AS part
	FROM idem_jobs WHERE state = 'available' AND queue = $2 AND run_at <= ` + clockNow + `
	ORDER BY priority, run_at, id LIMIT $9),
ranked AS (
	SELECT cand.id, cand.priority, cand.run_at,
		row_number() OVER (PARTITION BY cand.part ORDER BY cand.priority, cand.run_at, cand.id) + coalesce(run.n, 0) AS pos
	FROM cand LEFT JOIN run ON run.part = cand.part),
pick AS MATERIALIZED (SELECT id FROM ranked WHERE pos <= $7 ORDER BY priority, run_at, id LIMIT $3),
locked AS MATERIALIZED (
	SELECT j.id, j.state FROM pick, idem_jobs j WHERE ` + jobByID("pick.id") + `
	FOR UPDATE OF j SKIP LOCKED),
due AS (SELECT id FROM locked WHERE state = 'available'),
` + claimDue("$4", "$5", "$6")

// limitScan is how many due jobs, in claim order, a limited claim looks
// at to find limit that fit their partitions' free slots: a partition at
// its limit with more waiting jobs than this hides the ones behind it
// until its jobs finish.
func limitScan(limit int) int { return max(limit*16, 1000) }
