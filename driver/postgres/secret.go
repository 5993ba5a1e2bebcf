package postgres

import (
	"context"
	"fmt"
)

// Secret returns the secret called name, storing fresh as its value first
// if the database has none: the first caller's value wins, and every
// caller, on any host, gets the same one.
func (d *Driver) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if _, err := d.ex.Exec(ctx, `INSERT INTO idem_secrets (name, value) VALUES ($1, $2)
	ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
		return nil, fmt.Errorf("postgres: store secret %s: %w", name, err)
	}
	var v []byte
	if err := d.ex.QueryRow(ctx, `SELECT value FROM idem_secrets WHERE name = $1`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("postgres: read secret %s: %w", name, err)
	}
	return v, nil
}
