// Package sqlite is idem's embedded driver: one database file, no server.
//
// Every write goes through one connection that starts its transactions with
// BEGIN IMMEDIATE, so writers in this process queue in Go instead of spinning
// on busy_timeout, and a transaction never fails with SQLITE_BUSY after it
// has read. Reads use a separate pool. The file is in WAL mode with
// synchronous=FULL by default: a claim survives a power cut. NORMAL (by
// option) survives a killed process but may lose the last commits on power
// loss.
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
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded schema, in order.
func Migrations() []driver.Migration { return driver.MustLoadMigrations(migrationFS, "migrations") }

// Driver is an open SQLite database.
type Driver struct {
	path string
	w    *sql.DB // one connection, BEGIN IMMEDIATE
	r    *sql.DB // read pool
	now  func() time.Time
	migs []driver.Migration
	gc   *groupcommit.Queue // nil: every write commits on its own
}

// Open opens (creating if needed) the database file at path. Options may be
// given as a query string on the path: "idem.db?synchronous=normal".
func Open(ctx context.Context, path string, cfg driver.Config) (*Driver, error) {
	path, query, _ := strings.Cut(path, "?")
	if path == "" {
		return nil, errors.New("sqlite: empty database path (want sqlite:path/to/idem.db)")
	}
	if path == ":memory:" || strings.HasPrefix(path, "file::memory:") {
		return nil, errors.New("sqlite: in-memory databases are not supported: the ledger must outlive the process")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("sqlite: bad options %q: %w", query, err)
	}
	sync := "FULL"
	if cfg.SyncNormal {
		sync = "NORMAL"
	}
	for k, v := range q {
		switch k {
		case "synchronous":
			switch strings.ToUpper(v[0]) {
			case "FULL", "NORMAL":
				sync = strings.ToUpper(v[0])
			default:
				return nil, fmt.Errorf("sqlite: synchronous=%s: want full or normal", v[0])
			}
		default:
			return nil, fmt.Errorf("sqlite: unknown option %q (known: synchronous)", k)
		}
	}
	if dir := filepath.Dir(path); dir != "." {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("sqlite: directory of %s: %w", path, err)
		}
	}
	// _stmt_cache_size keeps the hot statements prepared on each connection:
	// preparing them again for every call cost more CPU than running them.
	base := "file:" + path + "?_journal_mode=WAL&_busy_timeout=10000&_synchronous=" + sync + "&_foreign_keys=on&_stmt_cache_size=64"
	w, err := sql.Open("sqlite3", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite3", base+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	d := &Driver{path: path, w: w, r: r, now: cfg.Now, migs: Migrations()}
	if err := w.PingContext(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if !cfg.NoMigrate {
		if err := d.Migrate(ctx); err != nil {
			d.Close()
			return nil, err
		}
	}
	d.startGroupCommit(cfg.MaxBatch)
	return d, nil
}

// Name returns "sqlite".
func (d *Driver) Name() string { return "sqlite" }

// DB returns the writer connection pool (one connection).
func (d *Driver) DB() *sql.DB { return d.w }

// ReadDB returns the read-only pool.
func (d *Driver) ReadDB() *sql.DB { return d.r }

// Migrations returns the embedded schema, in order.
func (d *Driver) Migrations() []driver.Migration { return d.migs }

// Migrate applies the schema under BEGIN IMMEDIATE, so concurrent openers
// (several processes on one file) apply each step once.
func (d *Driver) Migrate(ctx context.Context) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer tx.Rollback()
	if err := driver.ApplyMigrations(ctx, tx, d.migs, func(s string) string { return s }); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return tx.Commit()
}

// Close waits for the group commit in flight, then closes both pools.
func (d *Driver) Close() error {
	if d.gc != nil {
		d.gc.Close()
	}
	return errors.Join(d.r.Close(), d.w.Close())
}

// nowMS is the clock every statement uses, in Unix milliseconds.
func (d *Driver) nowMS() int64 {
	if d.now != nil {
		return d.now().UnixMilli()
	}
	return time.Now().UnixMilli()
}
