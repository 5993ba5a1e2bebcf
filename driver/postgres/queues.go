package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// PauseJobQueue pauses or resumes a queue in one upsert.
func (d *Driver) PauseJobQueue(ctx context.Context, queue string, paused bool) (idemtype.JobQueue, error) {
	q, err := scanJobQueue(d.ex.QueryRow(ctx, clockCTE+`INSERT INTO idem_job_queues AS q (queue, paused_at, updated_at)
	SELECT $2, CASE WHEN $3::bool THEN c.now END, c.now FROM c
	ON CONFLICT (queue) DO UPDATE SET updated_at = excluded.updated_at,
		paused_at = CASE WHEN $3::bool THEN coalesce(q.paused_at, excluded.updated_at) END
	RETURNING q.queue, q.paused_at, q.updated_at`, d.clock(), queue, paused))
	if err != nil {
		return q, fmt.Errorf("postgres: pause queue: %w", err)
	}
	return q, nil
}

// ListJobQueues returns every queue that has a row.
func (d *Driver) ListJobQueues(ctx context.Context) ([]idemtype.JobQueue, error) {
	rows, err := d.ex.Query(ctx, `SELECT queue, paused_at, updated_at FROM idem_job_queues ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list queues: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.JobQueue, error) { return scanJobQueue(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list queues: %w", err)
	}
	return out, nil
}

func scanJobQueue(s scanner) (idemtype.JobQueue, error) {
	var (
		q        idemtype.JobQueue
		pausedAt sql.NullTime
	)
	err := s.Scan(&q.Name, &pausedAt, &q.UpdatedAt)
	q.Paused, q.PausedAt = pausedAt.Valid, pausedAt.Time
	return q, err
}

// CountJobsByQueue counts every queue's jobs by state.
func (d *Driver) CountJobsByQueue(ctx context.Context) (map[string]map[idemtype.JobState]int, error) {
	rows, err := d.ex.Query(ctx, `SELECT queue, state, count(*) FROM idem_jobs GROUP BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs by queue: %w", err)
	}
	out, err := driver.ScanQueueCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs by queue: %w", err)
	}
	return out, nil
}
