package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
)

// TestPruneShrinksFile: a file this driver made gives back to the file
// system what the retention sweep frees; without it a database that once
// held a day of keys stays that big for ever.
func TestPruneShrinksFile(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			testPruneShrinksFile(t, tg.Open)
		})
	}
}

func testPruneShrinksFile(t *testing.T, open func(context.Context, string) (driver.Driver, error)) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	drv, err := open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	db := drv.DB()
	var shift atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	l, err := idem.New(ctx, drv, &idem.Options{Clock: clock, Retention: time.Hour, TombstoneTTL: time.Hour, MaxBatch: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	body := bytes.Repeat([]byte("x"), 4096)
	const keys = 1000
	for i := range keys {
		if _, err := l.Do(ctx, idem.Op{Key: fmt.Sprint("k", i)}, func(context.Context, *sql.Tx) ([]byte, error) {
			return body, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	full := fileSize(t, db, path)

	shift.Store(int64(3 * time.Hour)) // past retention and the tombstone window
	for pass := 0; pass < 2; pass++ { // tombstone, then delete
		if _, err := l.Prune(ctx, &idem.PruneOptions{Duty: 1}); err != nil {
			t.Fatal(err)
		}
		shift.Add(int64(2 * time.Hour))
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d keys left after pruning everything (%v)", n, err)
	}
	if empty := fileSize(t, db, path); empty > full/4 {
		t.Fatalf("file %d bytes with %d keys, %d after pruning them all: not given back", full, keys, empty)
	}
}

// fileSize checkpoints the WAL into the file and returns the file's size.
func fileSize(t *testing.T, db *sql.DB, path string) int64 {
	t.Helper()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
