//go:build !cgo

package dburl

// defaultSQLiteLibrary is modernc.org/sqlite where cgo is off: pure Go.
const defaultSQLiteLibrary = "modernc"
