//go:build cgo

package sqlite

import _ "github.com/mattn/go-sqlite3"

func init() { stmtLibs = append(stmtLibs, "sqlite3") }
