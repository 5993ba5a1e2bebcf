package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// body is the result every benchmark operation stores: a small JSON answer.
var body = []byte(`{"id":"ch_1Nq8ZL2eZvKYlo2C","amount":1000,"currency":"eur","status":"succeeded"}`)

// ledgerRows: claim+complete through the ledger (group commit at its
// default) against the same two statements written by hand, one commit
// each, on the ledger's own connection pool.
func (r *runner) ledgerRows(ctx context.Context) ([]Result, error) {
	var out []Result
	for _, c := range r.o.Concurrency {
		sts, err := r.ledgerStats(ctx, c)
		if err != nil {
			return out, err
		}
		var runs []Result
		for _, st := range sts {
			runs = append(runs, newResult(GroupLedger, "ledger claim+complete", "hand-written SQL, a commit per statement",
				r.db, c, r.o.Duration, st.idem, st.hand, true))
		}
		out = append(out, median(runs))
	}
	return out, nil
}

// groupCommitRows: the same ledger path with group commit at its default
// against the ledger with group commit off (one commit per write).
func (r *runner) groupCommitRows(ctx context.Context) ([]Result, error) {
	var out []Result
	for _, c := range r.o.Concurrency {
		sts, err := r.ledgerStats(ctx, c)
		if err != nil {
			return out, err
		}
		var runs []Result
		for _, st := range sts {
			runs = append(runs, newResult(GroupGroupCommit, "ledger group commit", "idem, one commit per write (MaxBatch -1)",
				r.db, c, r.o.Duration, st.idem, st.off, true))
		}
		out = append(out, median(runs))
	}
	return out, nil
}

// ledgerStat is claim+complete at one concurrency: through idem at its
// defaults, by hand, and through idem with group commit off.
type ledgerStat struct{ idem, hand, off Stat }

// ledgerStats measures the ledger and group-commit rows of one concurrency
// together, interleaved (see compare), each side on a database of its own,
// once (Options.Runs times, one ledgerStat a run): both row groups share
// it.
func (r *runner) ledgerStats(ctx context.Context, c int) ([]ledgerStat, error) {
	if sts, ok := r.ledgerCache[c]; ok {
		return sts, nil
	}
	idemL, idemScope, done, err := r.openLedger(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	sides := []side{{name: "idem", op: ledgerClaimComplete(idemL, idemScope)}}
	// Where each side's Stat goes in a run's ledgerStat.
	stats := []func(*ledgerStat) *Stat{func(st *ledgerStat) *Stat { return &st.idem }}
	names := []string{"idem"}
	if slices.Contains(r.o.Groups, GroupLedger) {
		l, scope, done, err := r.openLedger(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer done()
		sides = append(sides, side{name: "baseline", op: handClaimComplete(r.handDB(l), l.Driver().Name(), scope)})
		stats = append(stats, func(st *ledgerStat) *Stat { return &st.hand })
		names = append(names, "hand-written SQL")
	}
	if slices.Contains(r.o.Groups, GroupGroupCommit) {
		l, scope, done, err := r.openLedger(ctx, &idem.Options{MaxBatch: -1})
		if err != nil {
			return nil, err
		}
		defer done()
		sides = append(sides, side{name: "idem-one-commit-per-write", op: ledgerClaimComplete(l, scope)})
		stats = append(stats, func(st *ledgerStat) *Stat { return &st.off })
		names = append(names, "group commit off")
	}
	sts := make([]ledgerStat, r.o.Runs)
	err = r.repeat(func(k int) error {
		r.progress("ledger claim+complete, %s: %s", callers(c), strings.Join(names, ", "))
		res, err := compare(ctx, c, r.o.Duration, sides...)
		if err != nil {
			return fmt.Errorf("claim+complete, %s: %w", callers(c), err)
		}
		for i, s := range res {
			*stats[i](&sts[k]) = s
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if r.ledgerCache == nil {
		r.ledgerCache = map[int][]ledgerStat{}
	}
	r.ledgerCache[c] = sts
	return sts, nil
}

// openLedger opens a ledger on a fresh database with a scope of its own;
// done closes it (deleting the scope's rows on a shared database).
func (r *runner) openLedger(ctx context.Context, opts *idem.Options) (l *idem.Ledger, scope string, done func(), err error) {
	return r.openLedgerOn(ctx, nil, opts)
}

// openLedgerURL is openLedger on a database URL that edit rewrites.
func (r *runner) openLedgerURL(ctx context.Context, edit func(string) string) (l *idem.Ledger, scope string, done func(), err error) {
	return r.openLedgerOn(ctx, edit, nil)
}

func (r *runner) openLedgerOn(ctx context.Context, edit func(string) string, opts *idem.Options) (l *idem.Ledger, scope string, done func(), err error) {
	url, err := r.db.fresh(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if edit != nil {
		url = edit(url)
	}
	o := idem.Options{}
	if opts != nil {
		o = *opts
	}
	o.Logger = quiet
	if l, err = dburl.Open(ctx, url, &o); err != nil {
		return nil, "", nil, err
	}
	scope = name("bench")
	return l, scope, func() {
		if r.db.shared {
			deleteScope(l, r.db.driver, scope)
		}
		if h := r.hand[l]; h != nil {
			h.Close()
			delete(r.hand, l)
		}
		l.Close()
	}, nil
}

func deleteScope(l *idem.Ledger, driver, scope string) {
	q := `DELETE FROM idem_keys WHERE scope = ?`
	if driver == "postgres" {
		q = `DELETE FROM idem_keys WHERE scope = $1`
	}
	l.Driver().DB().ExecContext(context.Background(), q, scope)
}

// keys names a new key for every operation of one side.
type keys struct{ n atomic.Int64 }

func (k *keys) next() string { return "k" + strconv.FormatInt(k.n.Add(1), 10) }

func ledgerClaimComplete(l *idem.Ledger, scope string) opFunc {
	var ks keys
	return one(func(ctx context.Context, w int, seq int64) error {
		c, err := l.Claim(ctx, idem.Op{Scope: scope, Key: ks.next(), Fingerprint: "fp"})
		if err != nil {
			return err
		}
		if c.Outcome != idem.Acquired {
			return fmt.Errorf("claim of a new key: %s: %w", c.Outcome, errUnexpected)
		}
		return l.Complete(ctx, c, idem.Result{Status: 201, Body: body})
	})
}

// The hand-written baseline: what a careful programmer writes without idem
// for the same guarantee on the same table. A unique insert that says
// whether this caller got the key, then a completion fenced on the attempt
// and lease id, each in its own commit (the effect runs between them).
var handSQL = map[string]struct{ claim, complete string }{
	"sqlite": {
		claim: `INSERT INTO idem_keys
	(scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms, created_at, updated_at)
	VALUES (?1, ?2, ?3, 'in_progress', 1, ?4, ?5 + 30000, 86400000, 604800000, ?5, ?5)
	ON CONFLICT (scope, key) DO NOTHING RETURNING attempt`,
		complete: `UPDATE idem_keys SET state = 'succeeded', lease_until = ?1, updated_at = ?1, completed_at = ?1,
	expires_at = ?1 + retention_ms, tombstone_until = ?1 + retention_ms + tombstone_ms, status = ?6, body = ?7
	WHERE scope = ?2 AND key = ?3 AND attempt = ?4 AND lease_id = ?5 AND state = 'in_progress' AND lease_until > ?1`,
	},
	"postgres": {
		claim: `INSERT INTO idem_keys
	(scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms, created_at, updated_at)
	VALUES ($1, $2, $3, 'in_progress', 1, $4, now() + interval '30 seconds', 86400000, 604800000, now(), now())
	ON CONFLICT (scope, key) DO NOTHING RETURNING attempt`,
		complete: `UPDATE idem_keys SET state = 'succeeded', lease_until = now(), updated_at = now(), completed_at = now(),
	expires_at = now() + retention_ms * interval '1 millisecond',
	tombstone_until = now() + (retention_ms + tombstone_ms) * interval '1 millisecond', status = $5, body = $6
	WHERE scope = $1 AND key = $2 AND attempt = $3 AND lease_id = $4 AND state = 'in_progress' AND lease_until > now()`,
	},
}

// handLedger runs handSQL on a database: the baseline's two writes.
type handLedger struct {
	db  *sql.DB
	drv string
}

// claim inserts the key's claim and returns the fencing pair a completion
// must match; a taken key is sql.ErrNoRows.
func (h handLedger) claim(ctx context.Context, scope, key string) (attempt, leaseID int64, err error) {
	leaseID = rand.Int64()
	args := []any{scope, key, "fp", leaseID}
	if h.drv == "sqlite" {
		args = append(args, time.Now().UnixMilli())
	}
	err = h.db.QueryRowContext(ctx, handSQL[h.drv].claim, args...).Scan(&attempt)
	return attempt, leaseID, err
}

// complete stores the answer, fenced on the claim's attempt and lease id.
func (h handLedger) complete(ctx context.Context, scope, key string, attempt, leaseID int64, status int, body []byte) error {
	args := []any{scope, key, attempt, leaseID, status, body}
	if h.drv == "sqlite" {
		args = append([]any{time.Now().UnixMilli()}, args...)
	}
	res, err := h.db.ExecContext(ctx, handSQL[h.drv].complete, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("hand-written completion changed %d rows (%v): %w", n, err, errUnexpected)
	}
	return nil
}

func handClaimComplete(db *sql.DB, drv, scope string) opFunc {
	h := handLedger{db: db, drv: drv}
	var ks keys
	return one(func(ctx context.Context, w int, seq int64) error {
		k := ks.next()
		attempt, leaseID, err := h.claim(ctx, scope, k)
		if err != nil {
			return err
		}
		return h.complete(ctx, scope, k, attempt, leaseID, 201, body)
	})
}

// handDB is where a hand-written baseline on l's database runs: the
// ledger's pool on PostgreSQL; on SQLite a pool of one connection to the
// same file, so that the baseline's writers queue in Go, as a hand-written
// SQLite writer must (many connections spinning on busy_timeout starve each
// other) and as idem's own writer does.
func (r *runner) handDB(l *idem.Ledger) *sql.DB {
	if l.Driver().Name() != "sqlite" {
		return l.DB()
	}
	if h := r.hand[l]; h != nil {
		return h
	}
	var seq int
	var name, file string
	if err := l.DB().QueryRow(`PRAGMA database_list`).Scan(&seq, &name, &file); err != nil {
		return l.DB() // the baseline then measures the shared pool; the row still runs
	}
	drv, err := dburl.OpenDriver(context.Background(), dburl.URL{Driver: dburl.SQLite, Path: file, Options: url.Values{"synchronous": {r.db.sync}}}.String())
	if err != nil {
		return l.DB()
	}
	h := drv.DB()
	h.SetMaxOpenConns(1)
	h.Ping() // connect now, not in the measured window
	if r.hand == nil {
		r.hand = map[*idem.Ledger]*sql.DB{}
	}
	r.hand[l] = h
	return h
}
