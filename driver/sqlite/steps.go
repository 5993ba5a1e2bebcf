package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

// stepSaveQuery inserts the step only where the fence holds: the SELECT
// from idem_keys finds no row otherwise. On SQLite the writer is single,
// so nothing can take the key between the check and the commit.
var stepSaveQuery = `INSERT INTO idem_steps (scope, key, idx, name, state, attempt, fingerprint, result, updated_at)
	SELECT scope, key, ?6, ?7, ?8, attempt, fingerprint, ?9, ?1 FROM idem_keys WHERE ` + fenced + `
	ON CONFLICT (scope, key, idx) DO UPDATE SET name = excluded.name, state = excluded.state,
	attempt = excluded.attempt, fingerprint = excluded.fingerprint, result = excluded.result, updated_at = excluded.updated_at`

// StepSave writes one step of the run f holds.
func (d *Driver) StepSave(ctx context.Context, q driver.Executor, f driver.Fence, s idemtype.Step) error {
	var n int64
	err := d.gc.Write(ctx, q, &groupcommit.Write{
		Key:   f.Scope + "\x00" + f.Key,
		Query: stepSaveQuery,
		Args:  []any{d.nowMS(), f.Scope, f.Key, f.Attempt, f.LeaseID, s.Index, s.Name, string(s.State), s.Result},
		Exec:  func(rows int64) error { n = rows; return nil },
	})
	if err != nil {
		return fmt.Errorf("sqlite: step save: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// StepList reads a run's steps from the read pool, which sees every
// committed write.
func (d *Driver) StepList(ctx context.Context, scope, key string) ([]idemtype.Step, error) {
	rows, err := d.r.Query(ctx, `SELECT scope, key, idx, name, state, attempt, fingerprint, result, updated_at
	FROM idem_steps WHERE scope = ? AND key = ? ORDER BY idx`, scope, key)
	if err != nil {
		return nil, fmt.Errorf("sqlite: step list: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Step, error) {
		var (
			s  idemtype.Step
			st string
			at int64
		)
		err := r.Scan(&s.Scope, &s.Key, &s.Index, &s.Name, &st, &s.Attempt, &s.Fingerprint, &s.Result, &at)
		s.State, s.UpdatedAt = idemtype.StepState(st), fromMS(at)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: step list: %w", err)
	}
	return out, nil
}

// StepDelete deletes a run's steps.
func (d *Driver) StepDelete(ctx context.Context, q driver.Executor, scope, key string) error {
	if _, err := d.onWriter(q).Exec(ctx, `DELETE FROM idem_steps WHERE scope = ? AND key = ?`, scope, key); err != nil {
		return fmt.Errorf("sqlite: step delete: %w", err)
	}
	return nil
}

// StaleRuns lists runs whose holder's lease ended.
func (d *Driver) StaleRuns(ctx context.Context, limit int) ([]idemtype.RunRef, error) {
	rows, err := d.r.Query(ctx, `SELECT k.scope, k.key FROM idem_keys k
	JOIN idem_steps s ON s.scope = k.scope AND s.key = k.key AND s.idx = -1
	WHERE k.state = 'in_progress' AND k.lease_until <= ? ORDER BY k.lease_until LIMIT ?`, d.nowMS(), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stale runs: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.RunRef, error) {
		var ref idemtype.RunRef
		return ref, r.Scan(&ref.Scope, &ref.Key)
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: stale runs: %w", err)
	}
	return out, nil
}

// StepResolve resolves a started step and hands its run back to the next
// claim, in one transaction on the writer.
func (d *Driver) StepResolve(ctx context.Context, p driver.StepResolveParams) (idemtype.Record, error) {
	now := d.nowMS()
	tx, err := d.w.begin(ctx)
	if err != nil {
		return idemtype.Record{}, fmt.Errorf("sqlite: step resolve: %w", err)
	}
	defer tx.Rollback()
	rec, err := scanRecord(tx.QueryRow(ctx, `UPDATE idem_keys SET state = 'in_progress', lease_until = ?1, updated_at = ?1
	WHERE scope = ?2 AND key = ?3 AND (state = 'parked' OR (state = 'in_progress' AND (lease_until <= ?1 OR ?4)))
	AND EXISTS (SELECT 1 FROM idem_steps WHERE scope = ?2 AND key = ?3 AND idx >= 0 AND name = ?5 AND state = 'started')
	RETURNING `+cols, now, p.Scope, p.Key, p.Force, p.Name), now)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrFenced
	}
	if err != nil {
		return rec, fmt.Errorf("sqlite: step resolve: %w", err)
	}
	q := `DELETE FROM idem_steps WHERE scope = ?1 AND key = ?2 AND idx >= 0 AND name = ?3 AND state = 'started'`
	args := []any{p.Scope, p.Key, p.Name}
	if p.Done {
		q = `UPDATE idem_steps SET state = 'done', result = ?4, updated_at = ?5
	WHERE scope = ?1 AND key = ?2 AND idx >= 0 AND name = ?3 AND state = 'started'`
		args = append(args, p.Result, now)
	}
	n, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return rec, fmt.Errorf("sqlite: step resolve: %w", err)
	}
	if n != 1 {
		return rec, driver.ErrFenced
	}
	if err := tx.Commit(); err != nil {
		return rec, fmt.Errorf("sqlite: step resolve: %w", err)
	}
	return rec, nil
}

// StepRuns lists unfinished runs' records, newest first.
func (d *Driver) StepRuns(ctx context.Context, limit int) ([]idemtype.Record, error) {
	now := d.nowMS()
	rows, err := d.r.Query(ctx, `SELECT `+cols+` FROM idem_keys
	WHERE (scope, key) IN (SELECT DISTINCT scope, key FROM idem_steps) AND state IN ('in_progress', 'parked')
	ORDER BY updated_at DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: step runs: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Record, error) { return scanRecord(r, now) })
	if err != nil {
		return nil, fmt.Errorf("sqlite: step runs: %w", err)
	}
	return out, nil
}
