//go:build cgo

package dburl

import (
	"database/sql"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
)

// SQLiteLibrary names the SQLite library a URL-based open uses: with cgo,
// mattn/go-sqlite3 (see docs/performance.md for the measurement).
const SQLiteLibrary = "mattn/go-sqlite3"

// openSQLite opens path with mattn/go-sqlite3. _stmt_cache_size keeps the
// hot statements prepared on each connection: preparing them again for
// every call cost more CPU than running them.
func openSQLite(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", fileURI(path)+"?_txlock=immediate&_busy_timeout=10000&_foreign_keys=on&_stmt_cache_size=64")
	if err != nil {
		return nil, err
	}
	return poolSQLite(db)
}
