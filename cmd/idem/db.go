package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idemdev/idem/dburl"
)

// dbFlagHelp is how every command describes --db.
const dbFlagHelp = "database `URL`: sqlite (idem.db), sqlite:PATH, postgres://…, postgresql://… or host=… dbname=… (default $IDEM_DB, else sqlite:idem.db)"

// openURL reads a --db value with dburl, the one parser, and returns it
// for dburl.Open with what it names. Its errors never hold a password.
//
// An empty db is $IDEM_DB, else sqlite:idem.db: the flag's default is
// empty so that --help never prints a password from the environment.
func openURL(db string) (string, dburl.URL, error) {
	if db == "" {
		db = defaultDB()
	}
	u, err := dburl.Parse(db)
	if err != nil {
		return "", u, &badDB{err}
	}
	return db, u, nil
}

// badDB is a --db value that is not a database URL: bad usage, exit 2.
type badDB struct{ err error }

func (e *badDB) Error() string { return "--db: " + strings.TrimPrefix(e.err.Error(), "dburl: ") }
func (e *badDB) Unwrap() error { return e.err }

// openFailed reports why a command could not open its database and
// returns its exit code: 2 for a --db that is not a database URL (one
// line, pointing at the command's help), 1 for a database that would not
// open.
func openFailed(stderr io.Writer, name string, err error) int {
	var bad *badDB
	if errors.As(err, &bad) {
		return usagef(stderr, name, "%v", err)
	}
	fmt.Fprintf(stderr, "idem %s: %v\n", name, err)
	return 1
}

// proverDB reads the --db of prove and bench, where the bare words
// sqlite and postgres (and "" for prove) ask for a throwaway database the
// command makes and removes; anything else is a URL, read like every
// other command's --db.
func proverDB(db string) (string, error) {
	switch db {
	case "", "sqlite", "sqlite3", "postgres", "postgresql":
		return db, nil
	}
	open, _, err := openURL(db)
	return open, err
}
