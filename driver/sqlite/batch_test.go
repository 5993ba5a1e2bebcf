package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/idemdev/idem/internal/groupcommit/gctest"
	_ "modernc.org/sqlite"
)

// openGC opens a driver on path whose group commit records its batches.
func openGC(t *testing.T, path string) (*Driver, *gctest.Recorder) {
	t.Helper()
	d, err := testOpen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rec := &gctest.Recorder{}
	d.gc.Close()
	d.gc = groupcommit.NewWriter(d.w, DefaultMaxBatch, batchWait, rec.Wrap(d.commitBatch))
	return d, rec
}

func TestGroupCommitFailingStatement(t *testing.T) {
	t.Parallel()
	d, rec := openGC(t, filepath.Join(t.TempDir(), "idem.db"))
	gctest.FailingStatement(t, d, rec, submit(d), `INSERT INTO idem_keys (scope, key) VALUES (?, ?)`)
}

func TestGroupCommitRace(t *testing.T) {
	t.Parallel()
	d, _ := openGC(t, filepath.Join(t.TempDir(), "idem.db"))
	gctest.Race(t, d)
}

func TestGroupCommitCrash(t *testing.T) {
	if path := os.Getenv(gctest.ChildEnv); path != "" {
		d, err := testOpen(path)
		if err != nil {
			t.Fatal(err)
		}
		gctest.Child(d)
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	gctest.Crash(t, path, "TestGroupCommitCrash", func(t *testing.T) driver.Driver {
		d, err := testOpen(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// testOpen opens and sets up a driver on path (modernc.org/sqlite: it needs no cgo).
func testOpen(path string) (*Driver, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	d := New(db, &Options{CloseDB: true})
	if err := d.Setup(context.Background(), driver.Config{}); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// submit hands a write to d's group commit.
func submit(d *Driver) func(context.Context, *groupcommit.Write) error {
	return func(ctx context.Context, w *groupcommit.Write) error { return d.gc.Write(ctx, driver.Shared, w) }
}
