// Package postgres is idem's driver for PostgreSQL, the arbiter when many
// processes on many hosts share one ledger.
//
// Claims are single statements (INSERT … ON CONFLICT DO NOTHING RETURNING,
// and compare-and-swap UPDATEs), so no transaction is ever held open across
// a caller's work. Every lease is computed from the server's now(), never
// from a worker's clock. Fenced writes re-check their predicate after any
// lock wait, which is what makes them safe at READ COMMITTED.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded schema, in order.
func Migrations() []driver.Migration { return driver.MustLoadMigrations(migrationFS, "migrations") }

// Options configures a Driver. A nil *Options means all defaults.
type Options struct {
	// ClosePool makes Close close the pool too, for a pool opened only for
	// idem (as a URL-based open does). By default the application keeps
	// its pool.
	ClosePool bool
	// TransactionPooling says the pool reaches PostgreSQL through a pooler
	// in transaction mode (PgBouncer pool_mode=transaction), where a
	// session lasts one transaction. idem then opens no LISTEN connection
	// (ListenJobs returns errors.ErrUnsupported, and job workers poll every
	// PollInterval), and the pool must not use named prepared statements:
	// give it a DefaultQueryExecMode of QueryExecModeCacheDescribe (or
	// Exec, or SimpleProtocol), unless the pooler keeps prepared
	// statements itself (PgBouncer 1.21+ with max_prepared_statements).
	// dburl sets both for a URL with pooler=transaction.
	//
	// Setup checks, whatever this says, that named prepared statements
	// work when the pool uses them, and fails with an error naming this
	// option when they do not.
	TransactionPooling bool
}

// Driver is a PostgreSQL database, on the application's pgx pool.
type Driver struct {
	pool      *pgxpool.Pool
	ex        driver.Executor // pool, for statements outside a caller's transaction
	db        *sql.DB         // a database/sql view of pool, for Do's transactions
	cc        *pgx.ConnConfig // how to open connections of its own (group commit, LISTEN)
	closePool bool
	txPooling bool
	now       func() time.Time
	migs      []driver.Migration
	// gc gathers ledger writes into group commits, sent by the committers
	// on connections of their own.
	gc         *groupcommit.Writer
	committers []*committer
	writes     liveWrites // the ledger's writes, which a paced prune gives way to
}

// New makes a driver on the application's pool. Hand it to idem.New, which
// sets it up. The pool's connections run idem's statements outside
// transactions the application passes in; group commit and LISTEN use a
// few connections of their own, opened with the pool's connection config.
func New(pool *pgxpool.Pool, opts *Options) *Driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	d := &Driver{pool: pool, closePool: o.ClosePool, txPooling: o.TransactionPooling, migs: Migrations()}
	if pool != nil {
		d.ex = pgxExecutor{pool}
		d.db = stdlib.OpenDBFromPool(pool)
		d.cc = pool.Config().ConnConfig.Copy()
	}
	return d
}

// Setup checks that the server answers, applies the migrations and starts
// group commit.
func (d *Driver) Setup(ctx context.Context, cfg driver.Config) error {
	if d.pool == nil {
		return errors.New("postgres: New was given a nil pool")
	}
	if d.gc != nil {
		return nil // set up already
	}
	d.now = cfg.Now
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.pool.Ping(pctx); err != nil {
		return fmt.Errorf("postgres: connect to %s: %w", server(d.cc), err)
	}
	if err := d.checkPreparedStatements(pctx); err != nil {
		return err
	}
	if !cfg.NoMigrate {
		if _, err := d.Migrate(ctx); err != nil {
			return err
		}
	}
	d.startGroupCommit(groupcommit.MaxBatch(cfg.MaxBatch, DefaultMaxBatch))
	return nil
}

// server names the server, from the parsed config: nothing in it is secret.
func server(cc *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d user=%s database=%s", cc.Host, cc.Port, cc.User, cc.Database)
}

// Name returns "postgres".
func (d *Driver) Name() string { return "postgres" }

// DB returns a database/sql view of the pool.
func (d *Driver) DB() *sql.DB { return d.db }

// Pool returns the application's pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Begin begins a database/sql transaction on the pool, for user code (Do).
func (d *Driver) Begin(ctx context.Context) (*sql.Tx, func(), error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: begin: %w", err)
	}
	return tx, func() {}, nil
}

// Executor adapts a caller's transaction: a pgx.Tx, or a *sql.Tx from any
// pool on the same database.
func (d *Driver) Executor(tx any) (driver.Executor, error) {
	if t, ok := tx.(pgx.Tx); ok {
		return pgxExecutor{t}, nil
	}
	return driver.SQLTx("postgres", tx)
}

// Migrations returns the embedded schema, in order.
func (d *Driver) Migrations() []driver.Migration { return d.migs }

// Migrate applies the schema inside one transaction holding an advisory
// lock, so concurrent openers on many hosts apply each step once.
func (d *Driver) Migrate(ctx context.Context) ([]driver.Migration, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7152380910)`); err != nil {
		return nil, fmt.Errorf("postgres: migrate lock: %w", err)
	}
	added, err := driver.ApplyMigrations(ctx, driver.SQL(tx), d.migs, Rebind)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return added, tx.Commit()
}

// Close waits for the group commits in flight, then closes the committers'
// connections and the pool.
func (d *Driver) Close() error {
	if d.pool == nil {
		return nil // New was given no pool: nothing was opened
	}
	d.stopGroupCommit()
	err := d.db.Close()
	if d.closePool {
		d.pool.Close()
	}
	return err
}

// clock is the value bound to $1 of every statement: nil means the server's
// now(), an injected clock (tests) overrides it.
func (d *Driver) clock() any {
	if d.now != nil {
		return d.now()
	}
	return nil
}

// Rebind turns '?' placeholders into $1, $2, ….
func Rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
