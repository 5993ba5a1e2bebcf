// Package sqlite is idem's embedded driver: one database file, no server.
//
// It runs on the application's *sql.DB, opened with any database/sql SQLite
// driver: modernc.org/sqlite (pure Go) or mattn/go-sqlite3 (cgo). It keeps
// one connection of that pool for its writes, starts their transactions
// with BEGIN IMMEDIATE and queues them in Go, so that idem's writers never
// spin on busy_timeout and a transaction never fails with SQLITE_BUSY
// after it has read. Reads use the rest of the pool. Setup puts the file
// in WAL mode with synchronous=FULL by default: a claim survives a power
// cut. NORMAL (by option) survives a killed process but may lose the last
// commits on power loss.
//
// The application's own writing transactions on the same file (the ones it
// hands to EnqueueTx or ClaimTx) should begin with BEGIN IMMEDIATE too
// (_txlock=immediate in both drivers' DSNs) and set a busy_timeout, or a
// transaction that reads before it writes can fail with SQLITE_BUSY.
//
// SQLite runs on one host, so the host clock is the one clock: leases are
// computed from it at each statement, never from a clock a worker carries.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded schema, in order.
func Migrations() []driver.Migration { return driver.MustLoadMigrations(migrationFS, "migrations") }

// Synchronous is SQLite's durability setting for idem's writes.
type Synchronous string

// The settings idem runs with.
const (
	// SyncFull survives a power cut: each commit is on disk when it
	// returns. The default.
	SyncFull Synchronous = "FULL"
	// SyncNormal survives a killed process, but a power cut may lose the
	// last commits: a claim acknowledged just before it can run again.
	SyncNormal Synchronous = "NORMAL"
)

// Options configures a Driver. A nil *Options means all defaults.
type Options struct {
	// Synchronous is the durability of idem's writes. Default SyncFull.
	Synchronous Synchronous
	// CloseDB makes Close close the *sql.DB too, for a pool opened only
	// for idem (as a URL-based open does). By default the application
	// keeps its pool.
	CloseDB bool
}

// Driver is a SQLite database, made from the application's pool.
type Driver struct {
	db      *sql.DB         // the application's pool
	r       driver.Executor // db, for reads
	w       *writer         // one connection of it: every write
	sync    Synchronous
	closeDB bool
	now     func() time.Time
	migs    []driver.Migration
	gc      *groupcommit.Writer
	// vacuum: the file is in auto_vacuum=INCREMENTAL mode (a file made by
	// this driver; older ones are not until VACUUMed once).
	vacuum bool
}

// New makes a driver on db, a pool opened with any database/sql SQLite
// driver on a file (not :memory:: the ledger must outlive the process).
// The pool must allow at least two connections: one is kept for writes.
// Hand the driver to idem.New, which sets it up.
func New(db *sql.DB, opts *Options) *Driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Synchronous == "" {
		o.Synchronous = SyncFull
	}
	return &Driver{db: db, r: driver.SQL(db), sync: o.Synchronous, closeDB: o.CloseDB, migs: Migrations()}
}

// Setup takes the writer connection, sets the pragmas idem depends on and
// checks them, applies the migrations and starts group commit.
func (d *Driver) Setup(ctx context.Context, cfg driver.Config) error {
	if d.db == nil {
		return errors.New("sqlite: New was given a nil *sql.DB")
	}
	if d.w != nil {
		return nil // set up already
	}
	switch d.sync {
	case SyncFull, SyncNormal:
	default:
		return fmt.Errorf("sqlite: synchronous %q: want FULL or NORMAL", d.sync)
	}
	if n := d.db.Stats().MaxOpenConnections; n == 1 {
		return errors.New("sqlite: the pool allows one connection; idem keeps one for its writes: allow at least two (SetMaxOpenConns)")
	}
	d.now = cfg.Now
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: connect: %w", err)
	}
	if err := d.pragmas(ctx, conn); err != nil {
		conn.Close()
		return err
	}
	d.w = newWriter(conn)
	if err := d.checkPool(ctx); err != nil {
		d.w.close()
		d.w = nil // not set up: a later Setup tries again
		return err
	}
	if !cfg.NoMigrate {
		if _, err := d.Migrate(ctx); err != nil {
			d.w.close()
			d.w = nil
			return err
		}
	}
	d.gc = groupcommit.NewWriter(d.w, groupcommit.MaxBatch(cfg.MaxBatch, DefaultMaxBatch), batchWait, d.commitBatch)
	return nil
}

// pragmas sets, on the writer connection, what idem's promises rest on, and
// reads each back: a driver that ignored one must not run silently weaker.
func (d *Driver) pragmas(ctx context.Context, conn *sql.Conn) error {
	var file string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return fmt.Errorf("sqlite: read database file: %w", err)
	}
	if file == "" {
		return errors.New("sqlite: in-memory or temporary database: the ledger must outlive the process; open a file")
	}
	// A new file gives back to the file system what the retention sweep
	// frees (Prune runs incremental_vacuum). The mode can be chosen only
	// before the first table: on an older file this is a no-op, read back
	// below.
	if _, err := conn.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return fmt.Errorf("sqlite: auto_vacuum: %w", err)
	}
	mode, err := walMode(ctx, conn)
	if err != nil {
		return fmt.Errorf("sqlite: journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlite: journal_mode is %s, want wal", mode)
	}
	for _, p := range []struct{ set, get, want string }{
		{"PRAGMA synchronous = " + string(d.sync), "PRAGMA synchronous", map[Synchronous]string{SyncFull: "2", SyncNormal: "1"}[d.sync]},
		{"PRAGMA busy_timeout = 10000", "PRAGMA busy_timeout", "10000"},
		{"PRAGMA foreign_keys = ON", "PRAGMA foreign_keys", "1"},
	} {
		if _, err := conn.ExecContext(ctx, p.set); err != nil {
			return fmt.Errorf("sqlite: %s: %w", p.set, err)
		}
		var got string
		if err := conn.QueryRowContext(ctx, p.get).Scan(&got); err != nil {
			return fmt.Errorf("sqlite: %s: %w", p.get, err)
		}
		if got != p.want {
			return fmt.Errorf("sqlite: %s is %s after %q, want %s", p.get, got, p.set, p.want)
		}
	}
	// A statement that changes many rows in a transaction (a prune step's
	// DELETE, a batch of jobs) keeps the pages it changes in a statement
	// journal, and its IN lists in a temporary b-tree. In a file, every
	// page of these is a write system call; in memory, a prune deletes
	// more records a second (docs/performance.md). They hold what one
	// statement changes; a library built to keep temporary files on disk
	// ignores this pragma, which costs only that speed.
	if _, err := conn.ExecContext(ctx, `PRAGMA temp_store = MEMORY`); err != nil {
		return fmt.Errorf("sqlite: temp_store: %w", err)
	}
	var vacuum int
	if err := conn.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&vacuum); err != nil {
		return fmt.Errorf("sqlite: auto_vacuum: %w", err)
	}
	d.vacuum = vacuum == autoVacuumIncremental
	return nil
}

// autoVacuumIncremental is PRAGMA auto_vacuum's value for INCREMENTAL.
const autoVacuumIncremental = 2

// walBusyFor bounds how long walMode retries a busy database.
const walBusyFor = 10 * time.Second

// walMode switches the file to WAL and returns the journal mode now in
// force. The switch takes an exclusive lock for which SQLite does not call
// the busy handler, so several processes opening a new file at once can
// get SQLITE_BUSY from it: walMode retries that, with backoff, for up to
// walBusyFor (the busy_timeout the driver sets).
func walMode(ctx context.Context, conn *sql.Conn) (string, error) {
	deadline := time.Now().Add(walBusyFor)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var mode string
		err := conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		if err == nil || !strings.Contains(err.Error(), "database is locked") || time.Now().After(deadline) {
			return mode, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
	}
}

// checkPool reads the durability of the pool's other connections, which
// commit the application's transactions, and with them the records that
// ...Tx methods write: they must be at least as durable as idem's writer.
// mattn/go-sqlite3 runs WAL databases at NORMAL unless told otherwise.
func (d *Driver) checkPool(ctx context.Context) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: connect: %w", err)
	}
	defer conn.Close()
	var got int
	if err := conn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&got); err != nil {
		return fmt.Errorf("sqlite: read synchronous: %w", err)
	}
	if want := map[Synchronous]int{SyncFull: 2, SyncNormal: 1}[d.sync]; got < want {
		return fmt.Errorf("sqlite: the pool's connections run synchronous=%d, less durable than idem's %s: "+
			"open the pool with _synchronous=%s (mattn/go-sqlite3) or _pragma=synchronous(%s) (modernc.org/sqlite), or choose sqlite.SyncNormal",
			got, d.sync, d.sync, d.sync)
	}
	return nil
}

// Name returns "sqlite".
func (d *Driver) Name() string { return "sqlite" }

// DB returns the application's pool.
func (d *Driver) DB() *sql.DB { return d.db }

// Begin begins a transaction on the writer connection for user code (Do),
// holding the writer until end is called, after Commit or Rollback. Its
// first statement is a write, so the transaction holds SQLite's write lock
// from the start, as BEGIN IMMEDIATE would.
func (d *Driver) Begin(ctx context.Context) (*sql.Tx, func(), error) {
	if err := d.w.lock(ctx); err != nil {
		return nil, nil, err
	}
	tx, err := d.w.conn.BeginTx(ctx, nil)
	if err != nil {
		d.w.unlock()
		return nil, nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	if _, err := tx.ExecContext(ctx, takeWriteLock); err != nil {
		tx.Rollback()
		d.w.unlock()
		return nil, nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	return tx, d.w.unlock, nil
}

// takeWriteLock is a write that changes nothing: run first in a deferred
// transaction, it takes the write lock (waiting as busy_timeout allows)
// before the transaction has read anything.
const takeWriteLock = `UPDATE idem_migrations SET version = version WHERE version < 0`

// Executor adapts a caller's *sql.Tx, from any pool on the same file.
func (d *Driver) Executor(tx any) (driver.Executor, error) { return driver.SQLTx("sqlite", tx) }

// Migrations returns the embedded schema, in order.
func (d *Driver) Migrations() []driver.Migration { return d.migs }

// Migrate applies the schema under BEGIN IMMEDIATE, so concurrent openers
// (several processes on one file) apply each step once.
func (d *Driver) Migrate(ctx context.Context) ([]driver.Migration, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer tx.Rollback()
	added, err := driver.ApplyMigrations(ctx, tx, d.migs, func(s string) string { return s })
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return added, tx.Commit()
}

// Close waits for the group commit in flight and gives the writer
// connection back; with Options.CloseDB it closes the pool too.
func (d *Driver) Close() error {
	if d.gc != nil {
		d.gc.Close()
	}
	var err error
	if d.w != nil {
		err = d.w.close()
	}
	if d.closeDB {
		err = errors.Join(err, d.db.Close())
	}
	return err
}

// nowMS is the clock every statement uses, in Unix milliseconds.
func (d *Driver) nowMS() int64 {
	if d.now != nil {
		return d.now().UnixMilli()
	}
	return time.Now().UnixMilli()
}
