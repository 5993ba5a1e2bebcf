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
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded schema, in order.
func Migrations() []driver.Migration { return driver.MustLoadMigrations(migrationFS, "migrations") }

// Driver is an open PostgreSQL database.
type Driver struct {
	db   *sql.DB
	url  string
	now  func() time.Time
	migs []driver.Migration
	// gc gathers ledger writes into group commits (nil: off), sent by the
	// committers on connections of their own.
	gc         *groupcommit.Queue
	committers []*committer
}

// Open connects to url (postgres://… or postgresql://…) and checks that the
// server answers.
func Open(ctx context.Context, url string, cfg driver.Config) (*Driver, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: bad URL: %w", err)
	}
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	d := &Driver{db: db, url: url, now: cfg.Now, migs: Migrations()}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", redact(cc), err)
	}
	if !cfg.NoMigrate {
		if err := d.Migrate(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	d.startGroupCommit(cc, cfg.MaxBatch)
	return d, nil
}

// redact names the server without the password.
func redact(cc *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d user=%s database=%s", cc.Host, cc.Port, cc.User, cc.Database)
}

// Name returns "postgres".
func (d *Driver) Name() string { return "postgres" }

// DB returns the connection pool.
func (d *Driver) DB() *sql.DB { return d.db }

// Migrations returns the embedded schema, in order.
func (d *Driver) Migrations() []driver.Migration { return d.migs }

// Migrate applies the schema inside one transaction holding an advisory
// lock, so concurrent openers on many hosts apply each step once.
func (d *Driver) Migrate(ctx context.Context) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7152380910)`); err != nil {
		return fmt.Errorf("postgres: migrate lock: %w", err)
	}
	if err := driver.ApplyMigrations(ctx, tx, d.migs, Rebind); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return tx.Commit()
}

// Close waits for the group commits in flight, then closes the committers'
// connections and the pool.
func (d *Driver) Close() error {
	d.stopGroupCommit()
	return d.db.Close()
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
