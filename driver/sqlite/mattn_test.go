//go:build cgo

package sqlite_test

import (
	"context"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/drivertest"
	_ "github.com/mattn/go-sqlite3"
)

// With cgo, the suite runs on mattn/go-sqlite3 too, first: it is the
// library the CLI uses in a cgo build.
func init() {
	targets = append([]drivertest.Target{{
		Name:  "sqlite",
		NewDB: newDB,
		Open: func(ctx context.Context, path string) (driver.Driver, error) {
			return open("sqlite3", "file:"+path+"?_txlock=immediate&_busy_timeout=10000&_synchronous=FULL")
		},
	}}, targets...)
}
