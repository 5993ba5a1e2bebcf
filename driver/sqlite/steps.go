package sqlite

import (
	"context"
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
