// Package dburl opens idem on a database named by a URL, for the CLI and
// quick starts:
//
//	l, err := dburl.Open(ctx, "sqlite:idem.db", nil)
//	l, err := dburl.Open(ctx, "postgres://app@db1/app?pool_max_conns=16", nil)
//
// It imports both drivers and a SQLite library (mattn/go-sqlite3 with cgo,
// modernc.org/sqlite without), which is why the idem package itself does
// not: a service that opens idem on its own pool (idem.New with
// postgres.New or sqlite.New) compiles only the driver it uses.
package dburl
