package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/drivertest"
)

func TestMain(m *testing.M) { drivertest.Main(m) }

func TestConformance(t *testing.T) {
	drivertest.Run(t, "sqlite", func(t testing.TB) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	})
}

// TestURL covers the SQLite URL forms and the errors for the ones refused.
func TestURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, url := range []string{
		"sqlite:" + filepath.Join(dir, "a.db"),
		"sqlite://" + filepath.Join(dir, "b.db"),
		"sqlite3:" + filepath.Join(dir, "c.db"),
		"sqlite:" + filepath.Join(dir, "d.db") + "?synchronous=normal",
		"sqlite:" + filepath.Join(dir, "e.db") + "?synchronous=FULL",
	} {
		l, err := idem.Open(ctx, url, nil)
		if err != nil {
			t.Errorf("open %s: %v", url, err)
			continue
		}
		if _, err := l.Claim(ctx, idem.Op{Key: "k"}); err != nil {
			t.Errorf("claim on %s: %v", url, err)
		}
		l.Close()
	}
	for url, want := range map[string]string{
		"sqlite:":                           "empty database path",
		"sqlite::memory:":                   "in-memory",
		"sqlite:file::memory:?cache=shared": "in-memory",
		"sqlite:" + filepath.Join(dir, "x.db?synchronous=off"): "synchronous=off",
		"sqlite:" + filepath.Join(dir, "x.db?journal=delete"):  "unknown option",
		"sqlite:" + filepath.Join(dir, "missing", "x.db"):      "directory",
		"mysql://localhost/db":                                 "unknown database scheme",
		"idem.db":                                              "no scheme",
	} {
		l, err := idem.Open(ctx, url, nil)
		if err == nil {
			l.Close()
			t.Errorf("open %q succeeded, want an error mentioning %q", url, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("open %q: %v, want it to mention %q", url, err, want)
		}
	}
}
