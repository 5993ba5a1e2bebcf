package dburl

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/driver/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultPoolSize is the pool a URL-based open gives PostgreSQL unless the
// URL says pool_max_conns: enough for 32 concurrent callers, whose writes
// group commit gathers.
const defaultPoolSize = 32

// Open opens a ledger on the database named by url (see Parse for the
// forms), on a pool it opens and owns: Close closes it. A nil *Options
// means all defaults. Applications with a pool of their own hand it to
// idem.New through postgres.New or sqlite.New instead.
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
// yet set up: hand it to idem.New.
func OpenDriver(ctx context.Context, url string) (driver.Driver, error) {
	u, err := Parse(url)
	if err != nil {
		return nil, err
	}
	switch u.Driver {
	case "sqlite":
		db, err := openSQLite(u.Path)
		if err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", u.Path, err)
		}
		return sqlite.New(db, &sqlite.Options{Synchronous: u.Synchronous, CloseDB: true}), nil
	default:
		cfg, err := pgxpool.ParseConfig(u.Conn)
		if err != nil {
			return nil, fmt.Errorf("postgres: bad connection string %s: %w", Redact(u.Conn), err)
		}
		if !strings.Contains(u.Conn, "pool_max_conns") {
			cfg.MaxConns = defaultPoolSize
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("postgres: open %s: %w", Redact(u.Conn), err)
		}
		return postgres.New(pool, &postgres.Options{ClosePool: true}), nil
	}
}
