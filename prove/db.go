package prove

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// dbName is the database the prover creates on a cluster it starts.
const dbName = "idem_prove"

// database is where a run keeps its ledger and its effects.
type database struct {
	url     string
	driver  string // "sqlite" or "postgres"
	desc    string // for the report: never carries a password
	owned   bool   // the prover made it and removes it: it may prune and restart
	cluster *pgtest.Cluster
	cleanup func()
}

// openDatabase turns the --db value into a database:
//
//	"", "sqlite"          a temporary SQLite file, removed afterwards
//	"postgres"            a throwaway PostgreSQL cluster, removed afterwards
//	sqlite:PATH, postgres://…   the user's database, which is left in place
func openDatabase(ctx context.Context, db string) (*database, error) {
	switch db {
	case "", "sqlite", "sqlite3":
		dir, err := os.MkdirTemp("", "idem-prove-*")
		if err != nil {
			return nil, err
		}
		return &database{
			url: "sqlite:" + filepath.Join(dir, "prove.db"), driver: "sqlite",
			desc: "temporary SQLite file", owned: true,
			cleanup: func() { os.RemoveAll(dir) },
		}, nil
	case "postgres", "postgresql":
		// TCP for the ambiguous-commit proxy.
		c, err := pgtest.Start(ctx, &pgtest.Options{TCP: true})
		if err != nil {
			return nil, fmt.Errorf("starting a throwaway PostgreSQL (needs initdb and pg_ctl on PATH or under /usr/lib/postgresql/*/bin): %w", err)
		}
		u, err := c.CreateDatabase(ctx, dbName)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &database{
			url: u, driver: "postgres", desc: "throwaway PostgreSQL cluster",
			owned: true, cluster: c, cleanup: func() { c.Close() },
		}, nil
	}
	u, err := dburl.Parse(db)
	if err != nil {
		return nil, err // never holds the password
	}
	return &database{url: db, driver: u.Driver, desc: dburl.Redact(db), cleanup: func() {}}, nil
}
