package sqlite

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
)

var _ driver.Filler = (*Driver)(nil)

// fillChunk is how many rows one fill transaction inserts: large enough
// that the fsync per commit does not matter and that a page of the primary
// key (random keys land all over it) is written to the WAL once for many
// rows, small enough that the WAL stays a few hundred MB between
// checkpoints.
const fillChunk = 200_000

// fillCacheKiB is the writer's page cache during a fill (PRAGMA
// cache_size, in KiB): room for the primary key of 10M records, so that
// random inserts neither read its pages back nor spill them to the WAL
// mid-transaction. The cache the writer had is restored after the fill.
const fillCacheKiB = 1 << 20

// uuidV4 is a random UUIDv4 in SQL: 122 random bits, the version nibble 4
// and the variant bits 10.
const uuidV4 = `lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
	substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + abs(random() % 4), 1) ||
	substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))`

// FillCompleted inserts the records with a recursive CTE, fillChunk rows
// per transaction on the writer. The sample is read back by rowid, which
// the fill assigns in sequence.
func (d *Driver) FillCompleted(ctx context.Context, p driver.FillParams) ([]driver.FilledKey, error) {
	done := d.nowMS() - ms(p.Age)
	var first int64
	if err := d.w.QueryRow(ctx, `SELECT coalesce(max(rowid), 0) + 1 FROM idem_keys`).Scan(&first); err != nil {
		return nil, fmt.Errorf("sqlite: fill: %w", err)
	}
	var cache int64
	if err := d.w.QueryRow(ctx, `PRAGMA cache_size`).Scan(&cache); err != nil {
		return nil, fmt.Errorf("sqlite: fill: %w", err)
	}
	if _, err := d.w.Exec(ctx, fmt.Sprintf(`PRAGMA cache_size = -%d`, fillCacheKiB)); err != nil {
		return nil, fmt.Errorf("sqlite: fill: %w", err)
	}
	defer d.w.Exec(context.WithoutCancel(ctx), fmt.Sprintf(`PRAGMA cache_size = %d`, cache))
	scopes := max(p.Scopes, 1)
	for from := 0; from < p.N; from += fillChunk {
		to := min(from+fillChunk, p.N) - 1
		tx, err := d.w.begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("sqlite: fill: %w", err)
		}
		_, err = tx.Exec(ctx, `WITH RECURSIVE s(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2)
	INSERT INTO idem_keys (scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms,
		created_at, updated_at, completed_at, expires_at, tombstone_until, status, body)
	SELECT ?3 || '-' || (i % ?4), `+uuidV4+`, 'fill', 'succeeded', 1, 0, ?5, ?6, ?7,
		?5, ?5, ?5, ?5 + ?6, ?5 + ?6 + ?7, 201, ?8 FROM s`,
			from, to, p.Scope, scopes, done, ms(p.Retention), ms(p.TombstoneTTL), p.Body)
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			tx.Rollback()
			return nil, fmt.Errorf("sqlite: fill: %w", err)
		}
	}
	if p.Sample <= 0 || p.N <= 0 {
		return nil, nil
	}
	stride := max(p.N/p.Sample, 1)
	rows, err := d.r.Query(ctx, `WITH RECURSIVE r(id) AS (SELECT ?1 UNION ALL SELECT id + ?2 FROM r WHERE id + ?2 < ?3)
	SELECT scope, key FROM idem_keys WHERE rowid IN r`, first, stride, first+int64(p.N))
	if err != nil {
		return nil, fmt.Errorf("sqlite: fill: sample: %w", err)
	}
	out, err := driver.ScanAll(rows, driver.ScanFilledKey)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fill: sample: %w", err)
	}
	return out, nil
}

// LedgerSize sums the pages of idem_keys and its indexes from the dbstat
// virtual table where the SQLite library has it; elsewhere Ledger is the
// file's used pages (every table's).
func (d *Driver) LedgerSize(ctx context.Context) (driver.Size, error) {
	var s driver.Size
	var pages, free, size int64
	if err := d.r.QueryRow(ctx, `SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count),
		(SELECT page_size FROM pragma_page_size)`).Scan(&pages, &free, &size); err != nil {
		return s, fmt.Errorf("sqlite: size: %w", err)
	}
	s.File, s.Free = pages*size, free*size
	err := d.r.QueryRow(ctx, `SELECT coalesce(sum(pgsize), 0) FROM dbstat
	WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = 'idem_keys')`).Scan(&s.Ledger)
	if err == nil {
		s.How = "dbstat: idem_keys and its indexes"
		return s, nil
	}
	s.Ledger, s.How = s.File-s.Free, "the file's used pages (no dbstat in this SQLite build)"
	return s, nil
}
