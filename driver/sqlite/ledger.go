package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

const cols = `scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms,
	created_at, updated_at, completed_at, expires_at, tombstone_until, status, meta, body`

// ms converts a duration to the milliseconds the schema stores.
func ms(d time.Duration) int64 { return d.Milliseconds() }

func fromMS(v int64) time.Time { return time.UnixMilli(v) }

func nullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(s scanner, now int64) (idemtype.Record, error) {
	var (
		r                                      idemtype.Record
		state                                  string
		leaseUntil, retention, tomb, cAt, uAt  int64
		completedAt, expiresAt, tombstoneUntil sql.NullInt64
	)
	err := s.Scan(&r.Scope, &r.Key, &r.Fingerprint, &state, &r.Attempt, &r.LeaseID, &leaseUntil, &retention, &tomb,
		&cAt, &uAt, &completedAt, &expiresAt, &tombstoneUntil, &r.Status, &r.Meta, &r.Body)
	if err != nil {
		return r, err
	}
	r.State = idemtype.State(state)
	r.LeaseUntil = fromMS(leaseUntil)
	r.Retention = time.Duration(retention) * time.Millisecond
	r.TombstoneTTL = time.Duration(tomb) * time.Millisecond
	r.CreatedAt, r.UpdatedAt = fromMS(cAt), fromMS(uAt)
	r.CompletedAt, r.ExpiresAt, r.TombstoneUntil = nullMS(completedAt), nullMS(expiresAt), nullMS(tombstoneUntil)
	r.Now = fromMS(now)
	return r, nil
}

// Claim inserts a new record or returns the existing one. The insert is one
// statement on the writer (group-committed with other callers' writes
// unless q is set); it returns no columns, since a new record holds exactly
// what was inserted. The read of an existing row uses the read pool, so
// replays do not queue behind writers. The read comes after the insert's
// commit, so it sees a row that a write of the same batch inserted. (A
// read before the insert would answer a replay without the writer, but
// costs every new key a read: in the same runs at 1 caller, ledger
// claim+complete went from 0.97–1.00 to 0.85–0.97 of hand-written SQL and
// the gateway from 0.95–0.97 to 0.82–0.86 of a hand-written safe proxy.)
func (d *Driver) Claim(ctx context.Context, q driver.Executor, p driver.ClaimParams) (idemtype.Record, bool, error) {
	r := driver.Executor(d.r)
	if q != driver.Shared {
		r = q
	}
	now := d.nowMS()
	var created bool
	err := d.gc.Write(ctx, q, &groupcommit.Write{
		Key: p.Scope + "\x00" + p.Key,
		Query: `INSERT INTO idem_keys
	(scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms, created_at, updated_at)
	VALUES (?1, ?2, ?3, 'in_progress', 1, ?4, ?5, ?6, ?7, ?8, ?8)
	ON CONFLICT (scope, key) DO NOTHING`,
		Args: []any{p.Scope, p.Key, p.Fingerprint, p.LeaseID, now + ms(p.Lease), ms(p.Retention), ms(p.TombstoneTTL), now},
		Exec: func(n int64) error { created = n == 1; return nil },
	})
	if err != nil {
		return idemtype.Record{}, false, fmt.Errorf("sqlite: claim: %w", err)
	}
	if created {
		return p.Created(fromMS(now+ms(p.Lease)), fromMS(now)), true, nil
	}
	rec, err := d.get(ctx, r, p.Scope, p.Key)
	if errors.Is(err, driver.ErrNotFound) {
		return rec, false, driver.ErrConflict // pruned between the two steps
	}
	return rec, false, err
}

// Get reads one record from the read pool.
func (d *Driver) Get(ctx context.Context, scope, key string) (idemtype.Record, error) {
	return d.get(ctx, d.r, scope, key)
}

func (d *Driver) get(ctx context.Context, q driver.Executor, scope, key string) (idemtype.Record, error) {
	now := d.nowMS()
	rec, err := scanRecord(q.QueryRow(ctx, `SELECT `+cols+` FROM idem_keys WHERE scope = ? AND key = ?`, scope, key), now)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrNotFound
	}
	if err != nil {
		return rec, fmt.Errorf("sqlite: get: %w", err)
	}
	return rec, nil
}

// takeable is the predicate every takeover re-checks inside its write: a
// released key, a stale in-progress claim, or a record past its tombstone.
const takeable = `(state = 'released'
	OR (state = 'in_progress' AND lease_until <= ?1)
	OR (state IN ('succeeded', 'failed', 'tombstone') AND tombstone_until <= ?1))`

// Takeover is a compare-and-swap on (state, attempt) that also re-checks
// that the record is free to take.
func (d *Driver) Takeover(ctx context.Context, q driver.Executor, p driver.TakeoverParams) (idemtype.Record, error) {
	now := d.nowMS()
	var w *groupcommit.Write
	if p.Park {
		w = &groupcommit.Write{Query: `UPDATE idem_keys SET state = 'parked', lease_until = ?1, updated_at = ?1
	WHERE scope = ?2 AND key = ?3 AND state = 'in_progress' AND attempt = ?4 AND lease_until <= ?1
	RETURNING ` + cols, Args: []any{now, p.Scope, p.Key, p.FromAttempt}}
	} else {
		w = &groupcommit.Write{Query: `UPDATE idem_keys SET state = 'in_progress', attempt = attempt + 1,
	lease_id = ?2, lease_until = ?3, fingerprint = ?4, retention_ms = ?5, tombstone_ms = ?6, updated_at = ?1,
	completed_at = NULL, expires_at = NULL, tombstone_until = NULL, status = 0, meta = NULL, body = NULL
	WHERE scope = ?7 AND key = ?8 AND state = ?9 AND attempt = ?10 AND ` + takeable + `
	RETURNING ` + cols, Args: []any{now, p.LeaseID, now + ms(p.Lease), p.Fingerprint, ms(p.Retention), ms(p.TombstoneTTL),
			p.Scope, p.Key, string(p.FromState), p.FromAttempt}}
	}
	var (
		rec   idemtype.Record
		taken bool
	)
	w.Key = p.Scope + "\x00" + p.Key
	w.Row = func(row groupcommit.Scanner) error {
		var err error
		rec, err = scanRecord(row, now)
		taken = err == nil
		return groupcommit.NoRowIsAnswer(err)
	}
	if err := d.gc.Write(ctx, q, w); err != nil {
		return rec, fmt.Errorf("sqlite: takeover: %w", err)
	}
	if !taken {
		return rec, driver.ErrConflict
	}
	return rec, nil
}

// fenced is the predicate of every write a holder makes.
const fenced = `scope = ?2 AND key = ?3 AND attempt = ?4 AND lease_id = ?5 AND state = 'in_progress' AND lease_until > ?1`

// fencedArgs is how many parameters fenced reads: the clock and the fence.
const fencedArgs = 5

// Heartbeat extends a held lease.
func (d *Driver) Heartbeat(ctx context.Context, f driver.Fence, lease time.Duration) (time.Time, error) {
	now := d.nowMS()
	var until sql.NullInt64
	err := d.gc.Write(ctx, driver.Shared, &groupcommit.Write{
		Key:   f.Scope + "\x00" + f.Key,
		Query: `UPDATE idem_keys SET lease_until = ?6, updated_at = ?1 WHERE ` + fenced + ` RETURNING lease_until`,
		Args:  []any{now, f.Scope, f.Key, f.Attempt, f.LeaseID, now + ms(lease)},
		Row: func(row groupcommit.Scanner) error {
			until = sql.NullInt64{}
			err := row.Scan(&until.Int64)
			until.Valid = err == nil
			return groupcommit.NoRowIsAnswer(err)
		},
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: heartbeat: %w", err)
	}
	if !until.Valid {
		return time.Time{}, driver.ErrFenced
	}
	return fromMS(until.Int64), nil
}

// finishSet is the SET clause shared by Finish and Resolve, reading the
// result from parameters ?first… in the order resultArgs binds them, so the
// two cannot drift apart: completed states start their retention clock;
// released and parked do not. ?1 is the statement's clock.
func finishSet(first int) string {
	st, status, meta, body := param(first), param(first+1), param(first+2), param(first+3)
	return `state = ` + st + `, lease_until = ?1, updated_at = ?1,
	completed_at = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN ?1 END,
	expires_at = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN ?1 + retention_ms END,
	tombstone_until = CASE WHEN ` + st + ` IN ('succeeded', 'failed') THEN ?1 + retention_ms + tombstone_ms END,
	status = ` + status + `, meta = ` + meta + `, body = ` + body
}

// resultArgs appends the result's parameters for finishSet(len(args)+1).
func resultArgs(args []any, st idemtype.State, status int, meta, body []byte) []any {
	return append(args, string(st), status, meta, body)
}

func param(n int) string { return "?" + strconv.Itoa(n) }

// finishQuery is Finish's statement, built once.
var finishQuery = `UPDATE idem_keys SET ` + finishSet(fencedArgs+1) + ` WHERE ` + fenced

// Finish ends a held claim, in the caller's transaction unless q is
// driver.Shared.
func (d *Driver) Finish(ctx context.Context, q driver.Executor, p driver.FinishParams) error {
	var n int64
	args := make([]any, 0, fencedArgs+4)
	args = append(args, d.nowMS(), p.Scope, p.Key, p.Attempt, p.LeaseID)
	err := d.gc.Write(ctx, q, &groupcommit.Write{
		Key:   p.Scope + "\x00" + p.Key,
		Query: finishQuery,
		Args:  resultArgs(args, p.State, p.Status, p.Meta, p.Body),
		Exec:  func(rows int64) error { n = rows; return nil },
	})
	if err != nil {
		return fmt.Errorf("sqlite: finish: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// Resolve applies an operator's decision.
func (d *Driver) Resolve(ctx context.Context, p driver.ResolveParams) (idemtype.Record, error) {
	now := d.nowMS()
	args := []any{now, p.Scope, p.Key, p.Force}
	row := d.w.QueryRow(ctx, `UPDATE idem_keys SET `+finishSet(len(args)+1)+`
	WHERE scope = ?2 AND key = ?3 AND (state = 'parked' OR (state = 'in_progress' AND (lease_until <= ?1 OR ?4)))
	RETURNING `+cols, resultArgs(args, p.State, p.Status, p.Meta, p.Body)...)
	rec, err := scanRecord(row, now)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, driver.ErrFenced
	}
	if err != nil {
		return rec, fmt.Errorf("sqlite: resolve: %w", err)
	}
	return rec, nil
}

// Prune deletes completed records past both their retention and their
// tombstone window at once (counted as tombstoned and deleted), drops the
// results of records past retention only (they become tombstones), and
// deletes tombstones and released keys past their window: at most limit
// rows of each kind. It is PrunePaced with no pauses.
func (d *Driver) Prune(ctx context.Context, limit int) (idemtype.PruneCounts, error) {
	return d.PrunePaced(ctx, limit, 1)
}

var _ driver.PacedPruner = (*Driver)(nil)

// PrunePaced is Prune in steps of a few rows of each kind, each sized to
// hold the writer about pruneStepHold. With duty 1 the steps share one
// transaction while no other caller waits for the writer; when one does,
// the step's transaction commits and the writer goes to the waiting
// callers (the writer's lock is first come, first served) before the
// next step. With duty below 1 every step commits, and the next starts
// no sooner than the step's time×(1−duty)/duty later, and only once the
// writer has been idle for pruneQuiet, or, under load that leaves it no
// such gap, when the prune's share of the writer has fallen to
// pruneMinDuty (or duty, if lower): the prune yields to live traffic and
// still finishes under steady load. Either way a claim waits behind at
// most one step, not a whole batch.
//
// The pause after a step begins with a passive checkpoint (see
// checkpoint): the prune copies the pages it wrote to the WAL into the
// database file itself, on a pool connection, without the writer. The
// automatic checkpoint would copy them inside whichever commit crosses
// wal_autocheckpoint, holding the writer: a step's or a claim's.
//
// A step commits without waiting for the disk (see beginUnsynced): a
// power cut may undo the last steps, which the next sweep redoes; a claim
// that saw a record gone commits with the durability asked for, which
// makes the step before it durable too.
func (d *Driver) PrunePaced(ctx context.Context, limit int, duty float64) (idemtype.PruneCounts, error) {
	var out idemtype.PruneCounts
	now := d.nowMS()
	var kinds [3]pruneKind
	var (
		tx      *wtx
		held    time.Time            // when tx took the writer
		pending idemtype.PruneCounts // done in tx, not yet committed
	)
	defer func() {
		if tx != nil {
			tx.Rollback()
		}
	}()
	// commit ends tx and counts what it did.
	commit := func() error {
		err := tx.Commit()
		tx = nil
		if err != nil {
			return fmt.Errorf("sqlite: prune: %w", err)
		}
		out.Tombstoned += pending.Tombstoned
		out.Deleted += pending.Deleted
		pending = idemtype.PruneCounts{}
		return nil
	}
	for !pruneDone(&kinds, limit) {
		if tx == nil {
			var err error
			if tx, err = d.w.beginUnsynced(ctx, d.sync); err != nil {
				return out, fmt.Errorf("sqlite: prune: %w", err)
			}
		}
		if held.IsZero() {
			held = time.Now()
		}
		rows := int(d.w.pruneRows.Load())
		if rows <= 0 {
			rows = firstPruneRows
		}
		start := time.Now()
		c, err := d.pruneStep(ctx, tx, now, &kinds, min(rows, limit), limit)
		if err != nil {
			return out, fmt.Errorf("sqlite: prune: %w", err)
		}
		took := time.Since(start)
		pending.Tombstoned += c.Tombstoned
		pending.Deleted += c.Deleted
		if changed := c.Tombstoned + c.Deleted; changed > 0 && took > 0 {
			// Size the next step from this one's rate, within bounds, and
			// between half and twice this one: a step the scheduler stalled
			// does not make the next ones tiny.
			next := int(float64(rows) * float64(pruneStepHold) / float64(took))
			d.w.pruneRows.Store(int64(min(max(next, rows/2, minPruneRows), 2*rows, maxPruneRows)))
		}
		if duty < 1 || d.w.contended() || ctx.Err() != nil {
			if err := commit(); err != nil {
				return out, err
			}
			if !pruneDone(&kinds, limit) {
				if err := d.yieldToOthers(ctx, time.Since(held), duty); err != nil {
					return out, err
				}
			}
			held = time.Time{}
		}
	}
	if tx != nil {
		if err := commit(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// A prune step's size: the first step of a driver, the bounds, and the
// time a step is sized to hold the writer. A claim arriving during a step
// waits for the rest of it; the step's own cost per row grows with the
// ledger (a random key's page of the primary key per deleted record).
const (
	firstPruneRows = 64
	minPruneRows   = 4
	maxPruneRows   = 4096
	pruneStepHold  = 2 * time.Millisecond
)

// maxPruneStepPause bounds a pause between two steps.
const maxPruneStepPause = time.Second

// A paced prune's step waits for the writer to have been idle for
// pruneQuiet (no caller held it or waited for it), but no longer than
// keeps the prune's share of the writer at pruneMinDuty: under load that
// never leaves the writer idle that long, the prune runs at that share.
const (
	pruneQuiet   = 2 * time.Millisecond
	pruneMinDuty = 0.1
)

// yieldToOthers waits after a prune step that held the writer for took
// (see driver.Yield), the first of the pause spent in a checkpoint.
func (d *Driver) yieldToOthers(ctx context.Context, took time.Duration, duty float64) error {
	if duty >= 1 {
		return nil
	}
	since := time.Now()
	if err := d.checkpoint(ctx); err != nil {
		return err
	}
	y := driver.Yield{Floor: pruneMinDuty, Quiet: pruneQuiet, Longest: maxPruneStepPause, IdleFor: d.w.idleFor}
	return y.Wait(ctx, since, took, duty)
}

// checkpoint copies the pages committed to the WAL into the database file
// (PRAGMA wal_checkpoint(PASSIVE)) on a pool connection: it does not take
// the writer, and writers and readers go on meanwhile. Copied up to the
// end, the WAL starts over at the next commit instead of growing past
// wal_autocheckpoint, and no commit holding the writer has to copy it.
// Another connection's checkpoint under way makes it do nothing.
func (d *Driver) checkpoint(ctx context.Context) error {
	var busy, logged, copied int
	if err := d.r.QueryRow(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logged, &copied); err != nil {
		return fmt.Errorf("sqlite: prune: checkpoint: %w", err)
	}
	return nil
}

// pruneDone reports whether no kind of row is left to prune in this batch.
func pruneDone(kinds *[3]pruneKind, limit int) bool {
	for _, k := range kinds {
		if !k.rest && k.done < limit {
			return false
		}
	}
	return true
}

// pruneKind is one kind of row a prune changes: records past retention,
// tombstones past their window, released keys past theirs.
type pruneKind struct {
	done int  // rows changed so far
	rest bool // a step found fewer than it asked for: none are left
}

// pruneStep changes at most rows rows of each kind still open, in tx, and
// returns what it changed.
func (d *Driver) pruneStep(ctx context.Context, tx *wtx, now int64, kinds *[3]pruneKind, rows, limit int) (idemtype.PruneCounts, error) {
	var out idemtype.PruneCounts
	// Each statement is served by a partial index (idem_keys_expires,
	// idem_keys_tombstone, idem_keys_released) instead of a table scan.
	// The first two share one window: the first lim records past
	// retention in the index's order. Of these, a record past its
	// tombstone window too is deleted without first being rewritten as a
	// tombstone nobody could see (past tombstone_until a claim takes the
	// key over anyway); the rest become tombstones: once the deletes are
	// done, the window's rest is the first lim−deleted records past
	// retention. A window, not a search of all records past retention for
	// those past both windows, which would read them all when there are
	// none.
	const window = `SELECT rowid FROM (SELECT rowid, tombstone_until AS until FROM idem_keys
		WHERE state IN ('succeeded', 'failed') AND expires_at <= ?1 LIMIT ?2 + 0) WHERE until `
	for i, stmts := range [3][]string{
		{`DELETE FROM idem_keys WHERE rowid IN (` + window + `<= ?1)`,
			`UPDATE idem_keys SET state = 'tombstone', status = 0, meta = NULL, body = NULL, updated_at = ?1
		WHERE rowid IN (` + window + `> ?1)`},
		{`DELETE FROM idem_keys WHERE rowid IN (SELECT rowid FROM idem_keys WHERE state = 'tombstone' AND tombstone_until <= ?1 LIMIT ?2 + 0)`},
		{`DELETE FROM idem_keys WHERE rowid IN (SELECT rowid FROM idem_keys WHERE state = 'released' AND updated_at + retention_ms <= ?1 LIMIT ?2 + 0)`},
	} {
		k := &kinds[i]
		lim := min(rows, limit-k.done)
		if k.rest || lim <= 0 {
			continue
		}
		got := 0
		for j, q := range stmts {
			n, err := tx.Exec(ctx, q, now, lim-got)
			if err != nil {
				return out, err
			}
			got += int(n)
			switch {
			case i == 0 && j == 0: // deleted at once
				out.Tombstoned += int(n)
				out.Deleted += int(n)
			case i == 0: // tombstoned
				out.Tombstoned += int(n)
			default:
				out.Deleted += int(n)
			}
		}
		k.done += got
		k.rest = got < lim
	}
	if d.vacuum && out.Tombstoned+out.Deleted > 0 {
		// Give the freed pages back to the file system, a bounded number a
		// step (a few per record: its body, its index entries). The pragma
		// frees one page per result row: read them all.
		rows, err := tx.Query(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, vacuumPagesPerRecord*(out.Tombstoned+out.Deleted)))
		if err == nil {
			for rows.Next() {
			}
			err = errors.Join(rows.Err(), rows.Close())
		}
		if err != nil {
			return out, fmt.Errorf("incremental_vacuum: %w", err)
		}
	}
	return out, nil
}

// vacuumPagesPerRecord bounds the pages a prune batch hands back to the
// file system, per record in the batch.
const vacuumPagesPerRecord = 4

// List returns records for operators, most recently updated first.
func (d *Driver) List(ctx context.Context, f idemtype.ListFilter) ([]idemtype.Record, error) {
	now := d.nowMS()
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := d.r.Query(ctx, `SELECT `+cols+` FROM idem_keys
	WHERE (?1 = '' OR state = ?1) AND (?2 = '' OR scope = ?2) AND (NOT ?3 OR (state = 'in_progress' AND lease_until <= ?4))
		AND (?6 = '' OR key = ?6)
	ORDER BY updated_at DESC LIMIT ?5`, string(f.State), f.Scope, f.Stale, now, limit, f.Key)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	out, err := driver.ScanAll(rows, func(r driver.Row) (idemtype.Record, error) { return scanRecord(r, now) })
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	return out, nil
}
