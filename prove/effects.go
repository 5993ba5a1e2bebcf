package prove

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
)

// effectsTable holds one row per local effect a worker performed. It has
// deliberately no unique constraint: a duplicate effect must be counted,
// not prevented, or the prover could not see the bug it is looking for.
// The name is prefixed so that it cannot clash with a user's table when
// the prover runs on the user's database.
const effectsTable = "idem_prove_effects"

const effectsDDL = `CREATE TABLE IF NOT EXISTS ` + effectsTable + ` (
	scope TEXT NOT NULL,
	key   TEXT NOT NULL,
	pid   INTEGER NOT NULL,
	body  TEXT NOT NULL
)`

const effectsIndexDDL = `CREATE INDEX IF NOT EXISTS ` + effectsTable + `_scope_key ON ` + effectsTable + ` (scope, key)`

// rebinder turns '?' placeholders into the driver's.
func rebinder(drv driver.Driver) func(string) string {
	if drv.Name() == "postgres" {
		return postgres.Rebind
	}
	return func(q string) string { return q }
}

// createEffects creates the effects table if it is missing.
func createEffects(ctx context.Context, db *sql.DB) error {
	for _, q := range []string{effectsDDL, effectsIndexDDL} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create %s: %w", effectsTable, err)
		}
	}
	return nil
}

// insertEffect performs one effect: a row in the caller's transaction.
func insertEffect(ctx context.Context, tx *sql.Tx, rebind func(string) string, scope, key, body string) error {
	_, err := tx.ExecContext(ctx, rebind(`INSERT INTO `+effectsTable+` (scope, key, pid, body) VALUES (?, ?, ?, ?)`),
		scope, key, os.Getpid(), body)
	return err
}

// localEffects reads every effect in scope: key → the bodies written.
func localEffects(ctx context.Context, db *sql.DB, rebind func(string) string, scope string) (map[string][]string, error) {
	rows, err := db.QueryContext(ctx, rebind(`SELECT key, body FROM `+effectsTable+` WHERE scope = ?`), scope)
	if err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var k, b string
		if err := rows.Scan(&k, &b); err != nil {
			return nil, fmt.Errorf("count effects: %w", err)
		}
		out[k] = append(out[k], b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	return out, nil
}

// dropEffects deletes the effects of scope (a run on the user's database
// cleans up after itself).
func dropEffects(ctx context.Context, db *sql.DB, rebind func(string) string, scope string) error {
	_, err := db.ExecContext(ctx, rebind(`DELETE FROM `+effectsTable+` WHERE scope = ?`), scope)
	return err
}
