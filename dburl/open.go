package dburl

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"runtime"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/driver/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultPoolSize is the pool Open gives PostgreSQL unless the URL says
// pool_max_conns: enough for 32 concurrent callers, whose writes group
// commit gathers.
const DefaultPoolSize = 32

// Open opens a ledger on the database named by url (see Parse for the
// forms), on a pool it opens and owns: Close closes it. A nil *Options
// means all defaults. Applications with a pool of their own hand it to
// idem.New through postgres.New or sqlite.New instead.
//
// SQLite files open with mattn/go-sqlite3 in a build with cgo and with
// modernc.org/sqlite (pure Go) in one without; library=modernc in the URL
// picks the pure-Go library in either (docs/performance.md compares them).
func Open(ctx context.Context, url string, opts *idem.Options) (*idem.Ledger, error) {
	drv, err := OpenDriver(ctx, url)
	if err != nil {
		return nil, err
	}
	l, err := idem.New(ctx, drv, opts)
	if err != nil {
		drv.Close()
		return nil, err
	}
	return l, nil
}

// OpenDriver makes the driver for url on a handle it opens and owns, not
// yet set up: hand it to idem.New (or call its Setup).
func OpenDriver(ctx context.Context, url string) (driver.Driver, error) {
	u, err := Parse(url)
	if err != nil {
		return nil, err
	}
	if u.Driver == SQLite {
		return openSQLite(u)
	}
	return openPostgres(ctx, u)
}

// openSQLite opens the file with the library the URL or the build picks,
// in a pool of one writer and readers.
func openSQLite(u URL) (driver.Driver, error) {
	lib := cmp.Or(u.Options.Get("library"), defaultSQLiteLibrary)
	open := sqliteLibraries[lib]
	if open == nil {
		return nil, fmt.Errorf("sqlite: library=%s is not in this build (built without cgo: use library=modernc)", lib)
	}
	sync := sqlite.Synchronous(strings.ToUpper(cmp.Or(u.Options.Get("synchronous"), "full")))
	db, err := open(u.SQLiteURI(), sync)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", u.Path, err)
	}
	n := 1 + max(4, runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return sqlite.New(db, &sqlite.Options{Synchronous: sync, CloseDB: true}), nil
}

// SQLiteLibraries reports which SQLite libraries this build can open
// (library=mattn needs cgo; library=modernc is always there).
func SQLiteLibraries() map[string]bool {
	out := map[string]bool{}
	for name := range sqliteLibraries {
		out[name] = true
	}
	return out
}

// sqliteLibraries opens a "file:" URI with each SQLite library in the
// build; the files sqlite_cgo.go and sqlite_modernc.go fill it in.
// Every connection of the pool runs with the durability the URL asks for,
// so that the application's own transactions on it (the ones it hands to
// the ...Tx methods) commit idem's records as durably as idem does.
var sqliteLibraries = map[string]func(uri string, sync sqlite.Synchronous) (*sql.DB, error){}

// openSQLiteModernc opens uri with modernc.org/sqlite. _txlock=immediate
// makes the application's transactions on this pool take SQLite's write
// lock at BEGIN, so they never fail with SQLITE_BUSY after reading.
func openSQLiteModernc(uri string, sync sqlite.Synchronous) (*sql.DB, error) {
	return sql.Open("sqlite", uri+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous("+string(sync)+")")
}

func openPostgres(ctx context.Context, u URL) (driver.Driver, error) {
	cfg, err := pgxpool.ParseConfig(u.ConnString)
	if err != nil {
		return nil, fmt.Errorf("postgres: connection string %s: %w", Redact(u.ConnString), err)
	}
	cfg.MaxConns = DefaultPoolSize
	u.Pool.apply(cfg)
	txPooling := u.Pool.Pooler == "transaction"
	if txPooling && !setsExecMode(u.ConnString) {
		// Named prepared statements would land on other server
		// connections: describe once, execute unnamed, one round trip.
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", Redact(u.ConnString), err)
	}
	return postgres.New(pool, &postgres.Options{ClosePool: true, TransactionPooling: txPooling}), nil
}

// setsExecMode reports whether a postgres:// connection string chooses
// pgx's default_query_exec_mode itself.
func setsExecMode(conn string) bool {
	i := queryStart(conn)
	if i < 0 {
		return false
	}
	q, err := url.ParseQuery(conn[i+1:])
	return err == nil && q.Has("default_query_exec_mode")
}

// apply sets the pool settings the URL gave.
func (p Pool) apply(cfg *pgxpool.Config) {
	if p.MaxConns > 0 {
		cfg.MaxConns = p.MaxConns
	}
	if p.MinConns > 0 {
		cfg.MinConns = p.MinConns
	}
	if p.MinIdleConns > 0 {
		cfg.MinIdleConns = p.MinIdleConns
	}
	if p.MaxConnLifetime > 0 {
		cfg.MaxConnLifetime = p.MaxConnLifetime
	}
	if p.MaxConnLifetimeJitter > 0 {
		cfg.MaxConnLifetimeJitter = p.MaxConnLifetimeJitter
	}
	if p.MaxConnIdleTime > 0 {
		cfg.MaxConnIdleTime = p.MaxConnIdleTime
	}
	if p.HealthCheckPeriod > 0 {
		cfg.HealthCheckPeriod = p.HealthCheckPeriod
	}
	if p.PingTimeout > 0 {
		cfg.PingTimeout = p.PingTimeout
	}
}
