package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/drivertest"
	"github.com/idemdev/idem/driver/sqlite"
	_ "github.com/mattn/go-sqlite3"
	_ "modernc.org/sqlite"
)

// The driver runs on both database/sql SQLite libraries: mattn/go-sqlite3
// (cgo) and modernc.org/sqlite (pure Go). Each target opens the file the way
// an application would, with BEGIN IMMEDIATE for its own transactions.
var (
	mattn = drivertest.Target{
		Name:  "sqlite",
		NewDB: newDB,
		Open: func(ctx context.Context, path string) (driver.Driver, error) {
			return open("sqlite3", "file:"+path+"?_txlock=immediate&_busy_timeout=10000&_synchronous=FULL")
		},
	}
	modernc = drivertest.Target{
		Name:  "sqlite-modernc",
		NewDB: newDB,
		Open: func(ctx context.Context, path string) (driver.Driver, error) {
			return open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
		},
	}
)

func newDB(t testing.TB) string { return filepath.Join(t.TempDir(), "idem.db") }

func open(lib, dsn string) (driver.Driver, error) {
	db, err := sql.Open(lib, dsn)
	if err != nil {
		return nil, err
	}
	return sqlite.New(db, &sqlite.Options{CloseDB: true}), nil
}

func TestMain(m *testing.M) { drivertest.Main(m, mattn, modernc) }

func TestConformance(t *testing.T) {
	drivertest.Run(t, mattn)
	drivertest.Run(t, modernc)
}
