package dburl

import "strings"

// SQLiteURI returns the "file:" URI that opens the SQLite file u.Path,
// with no query: a driver appends its own "?param=…". The path is escaped
// (EscapeSQLitePath), so the file opened is the file named.
func (u URL) SQLiteURI() string {
	p := EscapeSQLitePath(u.Path)
	if strings.HasPrefix(p, "//") {
		// "file://x" would name host x; an empty authority keeps the path.
		return "file://" + p
	}
	return "file:" + p
}

// EscapeSQLitePath escapes a file path for the path part of a SQLite
// "file:" URI. SQLite decodes %HH there and ends the path at "?" or "#",
// so unescaped, p%41.db would open pA.db and t1#x.db would open t1:
// "%", "?" and "#" become %25, %3F and %23. Everything else (spaces,
// Unicode) SQLite takes as it is.
func EscapeSQLitePath(path string) string {
	return sqlitePathEscaper.Replace(path)
}

var sqlitePathEscaper = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")
