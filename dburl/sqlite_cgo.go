//go:build cgo

package dburl

import (
	"database/sql"

	"github.com/idemdev/idem/driver/sqlite"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
)

// defaultSQLiteLibrary is mattn/go-sqlite3 where cgo is on: it costs less
// CPU per claim (docs/performance.md).
const defaultSQLiteLibrary = "mattn"

func init() {
	sqliteLibraries["mattn"] = openSQLiteMattn
}

// openSQLiteMattn opens uri with mattn/go-sqlite3. _stmt_cache_size keeps
// the hot statements prepared on each connection: preparing them again for
// every call cost more CPU than running them.
func openSQLiteMattn(uri string, sync sqlite.Synchronous) (*sql.DB, error) {
	return sql.Open("sqlite3", uri+"?_txlock=immediate&_busy_timeout=10000&_foreign_keys=on&_stmt_cache_size=64&_synchronous="+string(sync))
}
