package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

// stepSaveQuery checks the fence with an UPDATE of the record, which locks
// it until the transaction ends: a takeover waits for the step's commit and
// then re-checks its own predicate, so it never reads the steps from
// before a checkpoint that commits after it.
var stepSaveQuery = clockCTE + `, f AS (UPDATE idem_keys k SET updated_at = c.now FROM c WHERE ` + fenced + `
	RETURNING k.scope, k.key, k.attempt, k.fingerprint, c.now)
	INSERT INTO idem_steps (scope, key, idx, name, state, attempt, fingerprint, result, updated_at)
	SELECT f.scope, f.key, $6, $7, $8, f.attempt, f.fingerprint, $9, f.now FROM f
	ON CONFLICT (scope, key, idx) DO UPDATE SET name = excluded.name, state = excluded.state,
	attempt = excluded.attempt, fingerprint = excluded.fingerprint, result = excluded.result, updated_at = excluded.updated_at`

// StepSave writes one step of the run f holds.
func (d *Driver) StepSave(ctx context.Context, q driver.Executor, f driver.Fence, s idemtype.Step) error {
	var n int64
	err := d.gc.Write(ctx, q, &groupcommit.Write{
		Key:   f.Scope + "\x00" + f.Key,
		Query: stepSaveQuery,
		Args:  []any{d.clock(), f.Scope, f.Key, f.Attempt, f.LeaseID, s.Index, s.Name, string(s.State), s.Result},
		Exec:  func(rows int64) error { n = rows; return nil },
	})
	if err != nil {
		return fmt.Errorf("postgres: step save: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// StepList reads a run's steps.
func (d *Driver) StepList(ctx context.Context, scope, key string) ([]idemtype.Step, error) {
	rows, err := d.ex.Query(ctx, `SELECT scope, key, idx, name, state, attempt, fingerprint, result, updated_at
	FROM idem_steps WHERE scope = $1 AND key = $2 ORDER BY idx`, scope, key)
	if err != nil {
		return nil, fmt.Errorf("postgres: step list: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Step, error) {
		var (
			s  idemtype.Step
			st string
		)
		err := r.Scan(&s.Scope, &s.Key, &s.Index, &s.Name, &st, &s.Attempt, &s.Fingerprint, &s.Result, &s.UpdatedAt)
		s.State = idemtype.StepState(st)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: step list: %w", err)
	}
	return out, nil
}

// StepDelete deletes a run's steps.
func (d *Driver) StepDelete(ctx context.Context, q driver.Executor, scope, key string) error {
	if q == driver.Shared {
		q = d.ex
	}
	if _, err := q.Exec(ctx, `DELETE FROM idem_steps WHERE scope = $1 AND key = $2`, scope, key); err != nil {
		return fmt.Errorf("postgres: step delete: %w", err)
	}
	return nil
}

// StaleRuns lists runs whose holder's lease ended.
func (d *Driver) StaleRuns(ctx context.Context, limit int) ([]idemtype.RunRef, error) {
	rows, err := d.ex.Query(ctx, `SELECT k.scope, k.key FROM idem_keys k
	JOIN idem_steps s ON s.scope = k.scope AND s.key = k.key AND s.idx = -1
	WHERE k.state = 'in_progress' AND k.lease_until <= `+clockNow+` ORDER BY k.lease_until LIMIT $2`, d.clock(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: stale runs: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.RunRef, error) {
		var ref idemtype.RunRef
		return ref, r.Scan(&ref.Scope, &ref.Key)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: stale runs: %w", err)
	}
	return out, nil
}

// StepResolve resolves a started step and hands its run back to the next
// claim, in one transaction. The record's row is locked first, so a
// holder's checkpoint in flight (forced) commits before the step is read
// again by the second statement, which then finds it done and refuses.
func (d *Driver) StepResolve(ctx context.Context, p driver.StepResolveParams) (idemtype.Record, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return idemtype.Record{}, fmt.Errorf("postgres: step resolve: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ex := pgxExecutor{tx}
	rec, err := scanRecord(ex.QueryRow(ctx, clockCTE+`UPDATE idem_keys k SET state = 'in_progress', lease_until = c.now, updated_at = c.now
	FROM c WHERE k.scope = $2 AND k.key = $3
	AND (k.state = 'parked' OR (k.state = 'in_progress' AND (k.lease_until <= c.now OR $4::boolean)))
	AND EXISTS (SELECT 1 FROM idem_steps s WHERE s.scope = $2 AND s.key = $3 AND s.idx >= 0 AND s.name = $5 AND s.state = 'started')
	RETURNING `+cols("k.")+`, c.now`, d.clock(), p.Scope, p.Key, p.Force, p.Name))
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrFenced
	}
	if err != nil {
		return rec, fmt.Errorf("postgres: step resolve: %w", err)
	}
	q := `DELETE FROM idem_steps WHERE scope = $1 AND key = $2 AND idx >= 0 AND name = $3 AND state = 'started'`
	args := []any{p.Scope, p.Key, p.Name}
	if p.Done {
		q = `UPDATE idem_steps SET state = 'done', result = $4, updated_at = $5
	WHERE scope = $1 AND key = $2 AND idx >= 0 AND name = $3 AND state = 'started'`
		args = append(args, p.Result, rec.Now)
	}
	n, err := ex.Exec(ctx, q, args...)
	if err != nil {
		return rec, fmt.Errorf("postgres: step resolve: %w", err)
	}
	if n != 1 {
		return rec, driver.ErrFenced
	}
	if err := tx.Commit(ctx); err != nil {
		return rec, fmt.Errorf("postgres: step resolve: %w", unknownOutcome(err))
	}
	return rec, nil
}

// StepRuns lists unfinished runs' records, newest first.
func (d *Driver) StepRuns(ctx context.Context, limit int) ([]idemtype.Record, error) {
	rows, err := d.ex.Query(ctx, clockCTE+`SELECT `+cols("k.")+`, c.now FROM idem_keys k, c
	WHERE (k.scope, k.key) IN (SELECT DISTINCT scope, key FROM idem_steps) AND k.state IN ('in_progress', 'parked')
	ORDER BY k.updated_at DESC LIMIT $2`, d.clock(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: step runs: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Record, error) { return scanRecord(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: step runs: %w", err)
	}
	return out, nil
}
