package driver

import (
	"context"
	"fmt"
	"time"
)

// ApplyMigrations records and applies every migration in migs that the
// database has not seen, and returns those, in order. The caller runs it inside a transaction that holds
// the database's migration lock (BEGIN IMMEDIATE on SQLite, an advisory
// lock on PostgreSQL), so concurrent openers apply each step once. rebind
// turns '?' placeholders into the driver's own.
func ApplyMigrations(ctx context.Context, tx Executor, migs []Migration, rebind func(string) string) ([]Migration, error) {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_migrations (
	version INTEGER PRIMARY KEY,
	name TEXT NOT NULL,
	applied_at TEXT NOT NULL
)`); err != nil {
		return nil, fmt.Errorf("create idem_migrations: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT version FROM idem_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read idem_migrations: %w", err)
	}
	versions, err := ScanAll(rows, func(r Row) (int, error) {
		var v int
		err := r.Scan(&v)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("read idem_migrations: %w", err)
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	var added []Migration
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		added = append(added, m)
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, rebind(`INSERT INTO idem_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
			m.Version, m.Name, time.Now().UTC().Format(time.RFC3339)); err != nil {
			return nil, fmt.Errorf("record migration %d: %w", m.Version, err)
		}
	}
	return added, nil
}
