package dburl

import (
	"database/sql"
	"runtime"
)

// poolSQLite sizes a pool for the sqlite driver: one connection it keeps
// for writes, and readers.
func poolSQLite(db *sql.DB) (*sql.DB, error) {
	n := 1 + max(4, runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}
