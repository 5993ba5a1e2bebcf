//go:build !cgo

package dburl

import (
	"database/sql"

	_ "modernc.org/sqlite" // registers "sqlite"
)

// SQLiteLibrary names the SQLite library a URL-based open uses: without
// cgo, modernc.org/sqlite, in pure Go.
const SQLiteLibrary = "modernc.org/sqlite"

// openSQLite opens path with modernc.org/sqlite.
func openSQLite(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", fileURI(path)+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)")
	if err != nil {
		return nil, err
	}
	return poolSQLite(db)
}
