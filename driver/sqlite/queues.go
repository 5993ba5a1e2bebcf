package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// PauseJobQueue pauses or resumes a queue in one upsert on the writer.
func (d *Driver) PauseJobQueue(ctx context.Context, queue string, paused bool) (idemtype.JobQueue, error) {
	q, err := scanJobQueue(d.w.QueryRow(ctx, `INSERT INTO idem_job_queues AS q (queue, paused_at, updated_at)
	VALUES (?1, CASE WHEN ?2 THEN ?3 END, ?3)
	ON CONFLICT (queue) DO UPDATE SET updated_at = excluded.updated_at,
		paused_at = CASE WHEN ?2 THEN coalesce(q.paused_at, excluded.updated_at) END
	RETURNING queue, paused_at, updated_at`, queue, paused, d.nowMS()))
	if err != nil {
		return q, fmt.Errorf("sqlite: pause queue: %w", err)
	}
	return q, nil
}

// ListJobQueues returns every queue that has a row.
func (d *Driver) ListJobQueues(ctx context.Context) ([]idemtype.JobQueue, error) {
	rows, err := d.r.Query(ctx, `SELECT queue, paused_at, updated_at FROM idem_job_queues ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list queues: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.JobQueue, error) { return scanJobQueue(r) })
	if err != nil {
		return nil, fmt.Errorf("sqlite: list queues: %w", err)
	}
	return out, nil
}

func scanJobQueue(s scanner) (idemtype.JobQueue, error) {
	var (
		q        idemtype.JobQueue
		pausedAt sql.NullInt64
		updated  int64
	)
	err := s.Scan(&q.Name, &pausedAt, &updated)
	q.Paused, q.PausedAt, q.UpdatedAt = pausedAt.Valid, nullMS(pausedAt), fromMS(updated)
	return q, err
}

// CountJobsByQueue counts every queue's jobs by state.
func (d *Driver) CountJobsByQueue(ctx context.Context) (map[string]map[idemtype.JobState]int, error) {
	rows, err := d.r.Query(ctx, `SELECT queue, state, count(*) FROM idem_jobs GROUP BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs by queue: %w", err)
	}
	out, err := driver.ScanQueueCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs by queue: %w", err)
	}
	return out, nil
}
