package sqlite

import (
	"context"
	"fmt"
)

// Secret returns the secret called name, storing fresh as its value first
// if the database has none: the first caller's value wins, and every
// caller, in any process, gets the same one.
func (d *Driver) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if _, err := d.w.Exec(ctx, `INSERT INTO idem_secrets (name, value, created_at) VALUES (?, ?, ?)
	ON CONFLICT (name) DO NOTHING`, name, fresh, d.nowMS()); err != nil {
		return nil, fmt.Errorf("sqlite: store secret %s: %w", name, err)
	}
	var v []byte
	if err := d.w.QueryRow(ctx, `SELECT value FROM idem_secrets WHERE name = ?`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("sqlite: read secret %s: %w", name, err)
	}
	return v, nil
}
