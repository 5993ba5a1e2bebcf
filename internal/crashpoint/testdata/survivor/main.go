// Command survivor is an ordinary program that imports idem and runs
// through its crash points with IDEM_CRASHPOINT set: it must not die.
// crashpoint_test.go builds and runs it.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/crashpoint"
)

func main() {
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(os.Args[1], "idem.db"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer l.Close()
	// Do passes after-claim, before-commit and after-commit.
	res, err := l.Do(ctx, idem.Op{Key: "k"}, func(context.Context, *sql.Tx) ([]byte, error) {
		return []byte("done"), nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, name := range []string{crashpoint.AfterCall, crashpoint.MidResponse, crashpoint.AfterDelivery,
		crashpoint.MidBatch, crashpoint.JobAfterClaim, crashpoint.JobBeforeCommit, crashpoint.JobAfterCommit} {
		crashpoint.Hit(name)
	}
	fmt.Printf("survived: %s\n", res.Body)
}
