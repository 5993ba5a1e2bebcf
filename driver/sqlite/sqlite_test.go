package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/drivertest"
	"github.com/idemdev/idem/driver/sqlite"
	_ "modernc.org/sqlite"
)

// The driver runs on both database/sql SQLite libraries: modernc.org/sqlite
// (pure Go) always, and mattn/go-sqlite3 where cgo is on (mattn_test.go
// adds it). Each target opens the file the way an application would, with
// BEGIN IMMEDIATE for its own transactions.
var targets = []drivertest.Target{{
	Name:  "sqlite-modernc",
	NewDB: newDB,
	Open: func(ctx context.Context, path string) (driver.Driver, error) {
		return open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	},
}}

func newDB(t testing.TB) string { return filepath.Join(t.TempDir(), "idem.db") }

func open(lib, dsn string) (driver.Driver, error) {
	db, err := sql.Open(lib, dsn)
	if err != nil {
		return nil, err
	}
	return sqlite.New(db, &sqlite.Options{CloseDB: true}), nil
}

func TestMain(m *testing.M) { drivertest.Main(m, targets...) }

func TestConformance(t *testing.T) {
	for _, tg := range targets {
		drivertest.Run(t, tg)
	}
}
