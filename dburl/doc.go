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
//
// Parse reads a database URL and Redact hides the secrets in one; both
// only read strings. The accepted forms (Parse, Open) are:
//
//	sqlite, sqlite3                  the SQLite file idem.db (DefaultSQLitePath)
//	sqlite:PATH, sqlite://PATH       the SQLite file PATH, taken literally
//	sqlite:PATH?synchronous=normal   with options (after the last "?", when
//	                                 it is followed by key=value):
//	                                 synchronous=full|normal, and
//	                                 library=mattn|modernc (see Open)
//	postgres://…, postgresql://…     PostgreSQL, as libpq and pgx read it,
//	                                 multi-host lists (h1:5432,h2:5432) included
//	host=… dbname=… password='…'     a libpq keyword/value connection string
//
// Pool settings in a PostgreSQL URL or keyword string (pool_max_conns and
// the other names pgxpool reads) are taken out of the connection string
// into URL.Pool, so the connection string never sends them to the server.
// So is pooler=transaction, which says the URL reaches PostgreSQL through a
// pooler in transaction mode (PgBouncer pool_mode=transaction): Open then
// makes pgx describe statements and run them unnamed
// (default_query_exec_mode=cache_describe, unless the URL picks a mode) and
// jobs poll instead of LISTEN. Without it, idem.New fails with an error that
// names the option when the pooler breaks prepared statements. See
// docs/scaling.md.
package dburl
