package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

var colNames = []string{"scope", "key", "fingerprint", "state", "attempt", "lease_id", "lease_until", "retention_ms",
	"tombstone_ms", "created_at", "updated_at", "completed_at", "expires_at", "tombstone_until", "status", "meta", "body"}

// cols lists the record columns, each prefixed with p (e.g. "k.").
func cols(p string) string {
	return p + strings.Join(colNames, ", "+p)
}

// clockCTE binds $1 as the statement's clock: the server's
// statement_timestamp() unless a test injected one. Not now(), which is the
// start of the transaction: a fenced write late in a long transaction
// (CompleteTx after the handler ran) must check the lease against the time
// it runs, as SQLite does.
const clockCTE = `WITH c AS (SELECT ` + clockNow + ` AS now) `

// clockNow is clockCTE's clock as an expression. A scan that reads an index
// in order up to the clock (ORDER BY … LIMIT: a claim's due jobs, expired
// leases) compares with it, not with c.now. Joined to c, the scan may be
// planned as the inner side of a nested loop, whose order the planner does
// not keep: with statistics taken while the queue was nearly empty it then
// read every due job and sorted them, for each claim (26k rows, 23 ms a
// claim, where the index read in order stops at the limit).
const clockNow = `coalesce($1::timestamptz, statement_timestamp())`

const msInterval = ` * interval '1 millisecond'`

type scanner interface{ Scan(dest ...any) error }

func scanRecord(s scanner, lead ...any) (idemtype.Record, error) {
	var (
		r                                      idemtype.Record
		state                                  string
		retention, tomb                        int64
		completedAt, expiresAt, tombstoneUntil sql.NullTime
	)
	dest := append(lead, &r.Scope, &r.Key, &r.Fingerprint, &state, &r.Attempt, &r.LeaseID, &r.LeaseUntil, &retention, &tomb,
		&r.CreatedAt, &r.UpdatedAt, &completedAt, &expiresAt, &tombstoneUntil, &r.Status, &r.Meta, &r.Body, &r.Now)
	if err := s.Scan(dest...); err != nil {
		return r, err
	}
	r.State = idemtype.State(state)
	r.Retention = time.Duration(retention) * time.Millisecond
	r.TombstoneTTL = time.Duration(tomb) * time.Millisecond
	r.CompletedAt, r.ExpiresAt, r.TombstoneUntil = completedAt.Time, expiresAt.Time, tombstoneUntil.Time
	return r, nil
}

// Claim inserts a new record or returns the existing one. The insert is one
// statement (group-committed with other callers' writes unless q is set)
// that returns only what the server computed, since a new record holds
// exactly what was inserted. An existing record is read by a second
// statement, after the insert's commit, so that it sees a row that a
// concurrent inserter (or a write of the same batch) committed while the
// insert waited for it; if the row is gone by then (pruned), ErrConflict
// and the caller tries again.
func (d *Driver) Claim(ctx context.Context, q driver.Executor, p driver.ClaimParams) (idemtype.Record, bool, error) {
	var (
		rec     idemtype.Record
		created bool
	)
	err := d.write(ctx, q, &groupcommit.Write{
		Key: p.Scope + "\x00" + p.Key,
		Query: clockCTE + `INSERT INTO idem_keys
	(scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms, created_at, updated_at)
	SELECT $2, $3, $4, 'in_progress', 1, $5, c.now + $6` + msInterval + `, $7, $8, c.now, c.now FROM c
	ON CONFLICT (scope, key) DO NOTHING
	RETURNING lease_until, created_at`,
		Args: []any{d.clock(), p.Scope, p.Key, p.Fingerprint, p.LeaseID, p.Lease.Milliseconds(), p.Retention.Milliseconds(), p.TombstoneTTL.Milliseconds()},
		Row: func(row groupcommit.Scanner) error {
			err := row.Scan(&rec.LeaseUntil, &rec.CreatedAt)
			created = err == nil
			return groupcommit.NoRowIsAnswer(err)
		},
	})
	if err != nil {
		return idemtype.Record{}, false, fmt.Errorf("postgres: claim: %w", err)
	}
	if created {
		return p.Created(rec.LeaseUntil, rec.CreatedAt), true, nil
	}
	q = d.own(q)
	rec, err = d.get(ctx, q, p.Scope, p.Key)
	if errors.Is(err, driver.ErrNotFound) {
		return rec, false, driver.ErrConflict
	}
	return rec, false, err
}

// Get reads one record.
func (d *Driver) Get(ctx context.Context, scope, key string) (idemtype.Record, error) {
	return d.get(ctx, d.ex, scope, key)
}

func (d *Driver) get(ctx context.Context, q driver.Executor, scope, key string) (idemtype.Record, error) {
	rec, err := scanRecord(q.QueryRow(ctx, clockCTE+`SELECT `+cols("k.")+`, c.now FROM idem_keys k, c
	WHERE k.scope = $2 AND k.key = $3`, d.clock(), scope, key))
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrNotFound
	}
	if err != nil {
		return rec, fmt.Errorf("postgres: get: %w", err)
	}
	return rec, nil
}

// Takeover is a compare-and-swap on (state, attempt) that re-checks that the
// record is free to take.
func (d *Driver) Takeover(ctx context.Context, q driver.Executor, p driver.TakeoverParams) (idemtype.Record, error) {
	w := &groupcommit.Write{Key: p.Scope + "\x00" + p.Key}
	if p.Park {
		w.Query = clockCTE + `UPDATE idem_keys k SET state = 'parked', lease_until = c.now, updated_at = c.now
	FROM c WHERE k.scope = $2 AND k.key = $3 AND k.state = ` + heldKey + ` AND k.attempt = $4 AND k.lease_until <= c.now
	RETURNING ` + cols("k.") + `, c.now`
		w.Args = []any{d.clock(), p.Scope, p.Key, p.FromAttempt}
	} else {
		w.Query = clockCTE + `UPDATE idem_keys k SET state = 'in_progress', attempt = k.attempt + 1,
	lease_id = $2, lease_until = c.now + $3` + msInterval + `, fingerprint = $4, retention_ms = $5, tombstone_ms = $6, updated_at = c.now,
	completed_at = NULL, expires_at = NULL, tombstone_until = NULL, status = 0, meta = NULL, body = NULL
	FROM c WHERE k.scope = $7 AND k.key = $8 AND k.state = $9 AND k.attempt = $10
	AND (k.state = 'released'
		OR (k.state = 'in_progress' AND k.lease_until <= c.now)
		OR (k.state IN ('succeeded', 'failed', 'tombstone') AND k.tombstone_until <= c.now))
	RETURNING ` + cols("k.") + `, c.now`
		w.Args = []any{d.clock(), p.LeaseID, p.Lease.Milliseconds(), p.Fingerprint, p.Retention.Milliseconds(), p.TombstoneTTL.Milliseconds(),
			p.Scope, p.Key, string(p.FromState), p.FromAttempt}
	}
	var (
		rec   idemtype.Record
		taken bool
	)
	w.Row = func(row groupcommit.Scanner) error {
		var err error
		rec, err = scanRecord(row)
		taken = err == nil
		return groupcommit.NoRowIsAnswer(err)
	}
	if err := d.write(ctx, q, w); err != nil {
		return rec, fmt.Errorf("postgres: takeover: %w", err)
	}
	if !taken {
		return rec, driver.ErrConflict
	}
	return rec, nil
}

// fenced is the predicate of every write a holder makes ($2…$5).
const fenced = `k.scope = $2 AND k.key = $3 AND k.attempt = $4 AND k.lease_id = $5 AND k.state = ` + heldKey + ` AND k.lease_until > c.now`

// heldKey and heldJob are the state a write by a claim's holder requires,
// written as a sub-select rather than a literal so that the only index
// such a write can use is the primary key. From the literal the planner
// proves the predicate of the partial lease index (idem_keys_lease,
// idem_jobs_lease: state = 'in_progress' or 'running'), and with
// statistics taken while few claims were held, that index looks cheaper
// than a primary-key lookup: every write then reads every held claim,
// and every entry the index has gathered since the last vacuum. Measured
// on PostgreSQL 15 with 11,000 keys in progress: 2.3 ms a heartbeat
// instead of 0.2, and in a drain of 20,000 jobs each batch of completions
// read thousands of dead entries. The sub-select is an InitPlan, a
// parameter to the planner, which proves no predicate from it.
const (
	heldKey = `(SELECT 'in_progress')`
	heldJob = `(SELECT 'running')`
)

// fencedArgs is how many parameters fenced reads: the clock and the fence.
const fencedArgs = 5

// heartbeatSQL extends the lease of the claim fenced names by $6 ms.
const heartbeatSQL = clockCTE + `UPDATE idem_keys k SET lease_until = c.now + $6` + msInterval + `, updated_at = c.now
	FROM c WHERE ` + fenced + ` RETURNING k.lease_until`

// Heartbeat extends a held lease.
func (d *Driver) Heartbeat(ctx context.Context, f driver.Fence, lease time.Duration) (time.Time, error) {
	var until sql.NullTime
	err := d.write(ctx, driver.Shared, &groupcommit.Write{
		Key:   f.Scope + "\x00" + f.Key,
		Query: heartbeatSQL,
		Args:  []any{d.clock(), f.Scope, f.Key, f.Attempt, f.LeaseID, lease.Milliseconds()},
		Row: func(row groupcommit.Scanner) error {
			until = sql.NullTime{}
			err := row.Scan(&until.Time)
			until.Valid = err == nil
			return groupcommit.NoRowIsAnswer(err)
		},
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: heartbeat: %w", err)
	}
	if !until.Valid {
		return time.Time{}, driver.ErrFenced
	}
	return until.Time, nil
}

// finishSet is the SET clause shared by Finish and Resolve, reading the
// result from parameters $first… in the order resultArgs binds them, so the
// two cannot drift apart: completed states start their retention clock;
// released and parked do not.
func finishSet(first int) string {
	st, status, meta, body := param(first), param(first+1), param(first+2), param(first+3)
	return `state = ` + st + `, lease_until = c.now, updated_at = c.now,
	completed_at = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN c.now END,
	expires_at = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN c.now + k.retention_ms` + msInterval + ` END,
	tombstone_until = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN c.now + (k.retention_ms + k.tombstone_ms)` + msInterval + ` END,
	status = ` + status + `, meta = ` + meta + `, body = ` + body
}

// resultArgs appends the result's parameters for finishSet(len(args)+1).
func resultArgs(args []any, st idemtype.State, status int, meta, body []byte) []any {
	return append(args, string(st), status, meta, body)
}

func param(n int) string { return "$" + strconv.Itoa(n) }

// finishQuery is Finish's statement, built once.
var finishQuery = clockCTE + `UPDATE idem_keys k SET ` + finishSet(fencedArgs+1) + ` FROM c WHERE ` + fenced

// Finish ends a held claim, in the caller's transaction unless q is
// driver.Shared.
func (d *Driver) Finish(ctx context.Context, q driver.Executor, p driver.FinishParams) error {
	var n int64
	args := make([]any, 0, fencedArgs+4)
	args = append(args, d.clock(), p.Scope, p.Key, p.Attempt, p.LeaseID)
	err := d.write(ctx, q, &groupcommit.Write{
		Key:   p.Scope + "\x00" + p.Key,
		Query: finishQuery,
		Args:  resultArgs(args, p.State, p.Status, p.Meta, p.Body),
		Exec:  func(rows int64) error { n = rows; return nil },
	})
	if err != nil {
		return fmt.Errorf("postgres: finish: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// Resolve applies an operator's decision.
func (d *Driver) Resolve(ctx context.Context, p driver.ResolveParams) (idemtype.Record, error) {
	args := []any{d.clock(), p.Scope, p.Key, p.Force}
	rec, err := scanRecord(d.ex.QueryRow(ctx, clockCTE+`UPDATE idem_keys k SET `+finishSet(len(args)+1)+`
	FROM c WHERE k.scope = $2 AND k.key = $3
	AND (k.state = 'parked' OR (k.state = 'in_progress' AND (k.lease_until <= c.now OR $4::boolean)))
	RETURNING `+cols("k.")+`, c.now`, resultArgs(args, p.State, p.Status, p.Meta, p.Body)...))
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrFenced
	}
	if err != nil {
		return rec, fmt.Errorf("postgres: resolve: %w", err)
	}
	return rec, nil
}

var _ driver.PacedPruner = (*Driver)(nil)

// PrunePaced is Prune, then, when a batch came back full (more remain)
// and duty is below 1, a pause that gives way to the ledger's live writes
// in this process (driver.Yield): the pause duty asks for, then until no
// claim or completion has been in flight for pruneQuiet, at most until
// the sweep's share of the time is down to pruneMinDuty (or duty, if
// lower). A batch is one statement, a step of its own; on two cores its
// work on the server takes CPU time from the claims, which a sweep at a
// fixed share cut by a third (docs/performance.md).
func (d *Driver) PrunePaced(ctx context.Context, limit int, duty float64) (idemtype.PruneCounts, error) {
	start := time.Now()
	c, err := d.Prune(ctx, limit)
	if err != nil || duty >= 1 || (c.Tombstoned < limit && c.Deleted < limit) {
		return c, err
	}
	y := driver.Yield{Floor: pruneMinDuty, Quiet: pruneQuiet, Longest: time.Second, IdleFor: d.writes.idleFor}
	return c, y.Wait(ctx, time.Now(), time.Since(start), duty)
}

// A paced prune's batch waits for the ledger's writes to have been idle
// for pruneQuiet, but no longer than keeps its share of the time at
// pruneMinDuty.
const (
	pruneQuiet   = 2 * time.Millisecond
	pruneMinDuty = 0.1
)

// Prune deletes completed records past both their retention and their
// tombstone window at once (counted as tombstoned and deleted), drops the
// results of records past retention only (they become tombstones), and
// deletes tombstones and released keys past their window: at most limit
// rows of each kind, in one statement (one round trip, one commit). Rows
// locked by a live writer are skipped, not waited for.
func (d *Driver) Prune(ctx context.Context, limit int) (idemtype.PruneCounts, error) {
	var out idemtype.PruneCounts
	var gone, tomb, dead int
	if err := d.ex.QueryRow(ctx, pruneSQL, d.clock(), limit).Scan(&gone, &tomb, &dead); err != nil {
		return out, fmt.Errorf("postgres: prune: %w", err)
	}
	out.Tombstoned, out.Deleted = gone+tomb, gone+dead
	return out, nil
}

var _ driver.Vacuumer = (*Driver)(nil)

// VacuumLedger runs a plain VACUUM of idem_keys (and its TOAST table):
// the space of the rows a sweep deleted or rewrote becomes free for the
// next rows, where until autovacuum's next pass every new row would
// extend the table. It takes no lock that holds up reads or writes. The
// right to vacuum is checked first, since PostgreSQL skips a table its
// caller may not vacuum with only a warning.
func (d *Driver) VacuumLedger(ctx context.Context) error {
	var may bool
	if err := d.ex.QueryRow(ctx, mayVacuumSQL).Scan(&may); err != nil {
		return fmt.Errorf("postgres: vacuum: %w", err)
	}
	if !may {
		return errors.New("postgres: vacuum: the current role may not vacuum idem_keys (it takes the table's or the database's owner, a superuser, or on PostgreSQL 17 the MAINTAIN privilege); autovacuum still reclaims the space on its own schedule")
	}
	if _, err := d.ex.Exec(ctx, `VACUUM idem_keys`); err != nil {
		return fmt.Errorf("postgres: vacuum: %w", err)
	}
	return nil
}

// mayVacuumSQL reports whether VACUUM would process idem_keys rather than
// skip it: the role has the rights of the table's owner or the database's
// (superusers have every role's), or, from PostgreSQL 17, MAINTAIN on it.
// The CASE keeps a server that has no MAINTAIN privilege from parsing it.
const mayVacuumSQL = `SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')
	OR CASE WHEN current_setting('server_version_num')::int >= 170000 THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
	FROM pg_class c, pg_database d WHERE c.oid = 'idem_keys'::regclass AND d.datname = current_database()`

// pruneSQL is one prune batch. Each part finds its rows through a partial
// index (idem_keys_expires, idem_keys_tombstone, idem_keys_released), locks
// them, and changes them by ctid (a TID scan, not a second search of the
// primary key; a locked row keeps its ctid). The first two parts share one
// window w: the first limit records past retention. Of these, a record
// past its tombstone window too is deleted without first being rewritten
// as a tombstone nobody could see (past tombstone_until a claim takes the
// key over anyway); the rest become tombstones. The parts touch disjoint
// rows (they share one snapshot: the tombstones made here are not yet seen
// as tombstones). The windows' ends compare with clockNow, not c.now, so
// that each is the bound of its index scan (see clockNow). Joined to c, a
// scan planned as the outer side of the join, as it is when the
// statistics were taken with few tombstones, reads every tombstone in the
// index and filters them afterwards, on every batch (measured:
// tombstoning 300k records at 5k records/s, slowing batch after batch as
// its own tombstones piled up; 59k/s bounded). Each part also reads its
// index in order (oldest first): a custom plan for a clock the statistics
// say every record is past chose a sequential scan of the whole table
// otherwise, read again by every batch once those records were
// tombstones. A released key's window depends on its row's retention, so
// that part reads every released key whatever the bound.
const pruneSQL = clockCTE + `,
w AS (SELECT k.ctid AS id, k.tombstone_until <= ` + clockNow + ` AS past FROM idem_keys k
	WHERE k.state IN ('succeeded', 'failed') AND k.expires_at <= ` + clockNow + `
	ORDER BY k.expires_at LIMIT $2 FOR UPDATE OF k SKIP LOCKED),
gone AS (DELETE FROM idem_keys WHERE ctid = ANY(ARRAY(SELECT id FROM w WHERE past)) RETURNING 1),
tomb AS (UPDATE idem_keys SET state = 'tombstone', status = 0, meta = NULL, body = NULL, updated_at = c.now
	FROM c WHERE ctid = ANY(ARRAY(SELECT id FROM w WHERE NOT past)) RETURNING 1),
dead AS (DELETE FROM idem_keys WHERE ctid = ANY(ARRAY(SELECT k.ctid FROM idem_keys k
	WHERE k.state = 'tombstone' AND k.tombstone_until <= ` + clockNow + `
	ORDER BY k.tombstone_until LIMIT $2 FOR UPDATE OF k SKIP LOCKED)) RETURNING 1),
released AS (DELETE FROM idem_keys WHERE ctid = ANY(ARRAY(SELECT k.ctid FROM idem_keys k
	WHERE k.state = 'released' AND k.updated_at + k.retention_ms` + msInterval + ` <= ` + clockNow + `
	LIMIT $2 FOR UPDATE OF k SKIP LOCKED)) RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM tomb), (SELECT count(*) FROM dead) + (SELECT count(*) FROM released)`

// List returns records for operators, most recently updated first.
func (d *Driver) List(ctx context.Context, f idemtype.ListFilter) ([]idemtype.Record, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := d.ex.Query(ctx, clockCTE+`SELECT `+cols("k.")+`, c.now FROM idem_keys k, c
	WHERE ($2 = '' OR k.state = $2) AND ($3 = '' OR k.scope = $3) AND (NOT $4::boolean OR (k.state = 'in_progress' AND k.lease_until <= c.now))
		AND ($6 = '' OR k.key = $6)
	ORDER BY k.updated_at DESC LIMIT $5`, d.clock(), string(f.State), f.Scope, f.Stale, limit, f.Key)
	if err != nil {
		return nil, fmt.Errorf("postgres: list: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Record, error) { return scanRecord(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list: %w", err)
	}
	return out, nil
}
