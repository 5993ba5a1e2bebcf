package postgres

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
)

var _ driver.Filler = (*Driver)(nil)

// fillChunk is how many rows one fill statement inserts.
const fillChunk = 100_000

// FillCompleted inserts the records with generate_series and
// gen_random_uuid, fillChunk rows per statement, and keeps a random
// sample of what each statement returned.
func (d *Driver) FillCompleted(ctx context.Context, p driver.FillParams) ([]driver.FilledKey, error) {
	share := 0.0
	if p.N > 0 {
		share = float64(p.Sample) / float64(p.N)
	}
	var out []driver.FilledKey
	for from := 0; from < p.N; from += fillChunk {
		to := min(from+fillChunk, p.N) - 1
		rows, err := d.ex.Query(ctx, clockCTE+`, t AS (SELECT c.now - $2::bigint * interval '1 millisecond' AS done FROM c),
	ins AS (INSERT INTO idem_keys (scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms,
		created_at, updated_at, completed_at, expires_at, tombstone_until, status, body)
	SELECT $3::text || '-' || (i % $4::bigint), gen_random_uuid()::text, 'fill', 'succeeded', 1, 0, t.done, $5::bigint, $6::bigint,
		t.done, t.done, t.done, t.done + $5::bigint`+msInterval+`, t.done + ($5::bigint + $6::bigint)`+msInterval+`, 201, $7::bytea
	FROM generate_series($8::bigint, $9::bigint) i, t
	RETURNING scope, key)
	SELECT scope, key FROM ins WHERE random() < $10::float8`,
			d.clock(), p.Age.Milliseconds(), p.Scope, max(p.Scopes, 1), p.Retention.Milliseconds(), p.TombstoneTTL.Milliseconds(),
			p.Body, from, to, share)
		if err != nil {
			return nil, fmt.Errorf("postgres: fill: %w", err)
		}
		keys, err := driver.ScanAll(rows, driver.ScanFilledKey)
		if err != nil {
			return nil, fmt.Errorf("postgres: fill: %w", err)
		}
		out = append(out, keys...)
	}
	// The table as a ledger that grew over days would be: vacuumed and
	// analyzed, as autovacuum leaves it between its passes. Without this a
	// run measures the fill's aftermath instead: the planner planning for
	// an empty table, every first read of a new row setting its hint bits
	// (a write of the page), and autovacuum's first pass over the whole
	// table running next to the measurement.
	if _, err := d.ex.Exec(ctx, `VACUUM (ANALYZE) idem_keys`); err != nil {
		return nil, fmt.Errorf("postgres: fill: vacuum: %w", err)
	}
	return out, nil
}

// LedgerSize reads pg_total_relation_size (heap, TOAST and indexes) of
// idem_keys, and pg_database_size.
func (d *Driver) LedgerSize(ctx context.Context) (driver.Size, error) {
	s := driver.Size{How: "pg_total_relation_size: idem_keys with its TOAST table and indexes"}
	err := d.ex.QueryRow(ctx, `SELECT pg_total_relation_size('idem_keys'), pg_database_size(current_database())`).Scan(&s.Ledger, &s.File)
	if err != nil {
		return s, fmt.Errorf("postgres: size: %w", err)
	}
	return s, nil
}
