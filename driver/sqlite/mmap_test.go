package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
)

// With Options.MmapSize, a record read through the application's pool
// maps the file on the connection it used, and the writer maps it from
// the start; by default the pool's setting is left as the application
// made it.
func TestReadsMapTheFile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opt  int64
		want int64 // PRAGMA mmap_size on the pool's reader after a Get
	}{
		{"default", 0, 0},
		{"1MiB", 1 << 20, 1 << 20},
		{"4GiB", 4 << 30, 0x7fff0000}, // capped by SQLite
		{"negative", -1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(2) // the writer and one reader
			d := New(db, &Options{CloseDB: true, MmapSize: c.opt})
			if err := d.Setup(ctx, driver.Config{}); err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.Get(ctx, "s", "k"); !errors.Is(err, driver.ErrNotFound) {
				t.Fatalf("get: %v, want not found", err)
			}
			var got int64
			if err := db.QueryRowContext(ctx, `PRAGMA mmap_size`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("the pool's reader maps %d bytes after a get, want %d", got, c.want)
			}
			if err := d.w.QueryRow(ctx, `PRAGMA mmap_size`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("the writer maps %d bytes, want %d", got, c.want)
			}
		})
	}
}
