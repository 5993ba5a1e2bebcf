package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/idemdev/idem/internal/groupcommit/gctest"
)

// openGC opens a driver on path whose group commit records its batches.
func openGC(t *testing.T, path string) (*Driver, *gctest.Recorder) {
	t.Helper()
	d, err := Open(context.Background(), path, driver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rec := &gctest.Recorder{}
	d.gc.Close()
	d.gc = groupcommit.New(d.groupCommitConfig(DefaultMaxBatch), rec.Wrap(d.commitBatch))
	return d, rec
}

func TestGroupCommitFailingStatement(t *testing.T) {
	t.Parallel()
	d, rec := openGC(t, filepath.Join(t.TempDir(), "idem.db"))
	gctest.FailingStatement(t, d, rec, d.gc.Do, `INSERT INTO idem_keys (scope, key) VALUES (?, ?)`)
}

func TestGroupCommitRace(t *testing.T) {
	t.Parallel()
	d, _ := openGC(t, filepath.Join(t.TempDir(), "idem.db"))
	gctest.Race(t, d)
}

func TestGroupCommitCrash(t *testing.T) {
	if path := os.Getenv(gctest.ChildEnv); path != "" {
		d, err := Open(context.Background(), path, driver.Config{})
		if err != nil {
			t.Fatal(err)
		}
		gctest.Child(d)
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	gctest.Crash(t, path, "TestGroupCommitCrash", func(t *testing.T) driver.Driver {
		d, err := Open(context.Background(), path, driver.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}
