package dburl_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/dburl"
	_ "modernc.org/sqlite"
)

// sqliteNames are file names that a "file:" URI would misread unescaped.
var sqliteNames = []string{"p%41.db", "t1#x.db", "t1#y.db", "what?.db", "a b.db", "ü€.db", "100%.db", "%23.db"}

// onlyFile fails unless dir holds exactly want (and SQLite's -wal/-shm).
func onlyFile(t *testing.T, dir, want string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ents {
		switch e.Name() {
		case want:
			found = true
		case want + "-wal", want + "-shm", want + "-journal":
		default:
			t.Errorf("opening %q made %q", want, e.Name())
		}
	}
	if !found {
		t.Errorf("opening %q did not make it", want)
	}
}

// TestSQLiteURIOpensTheFileNamed opens each name through database/sql
// with u.SQLiteURI() and checks the file on disk.
func TestSQLiteURIOpensTheFileNamed(t *testing.T) {
	t.Parallel()
	for _, name := range sqliteNames {
		dir := t.TempDir()
		u, err := dburl.Parse("sqlite:" + filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", u.SQLiteURI()+"?_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE t (x)"); err != nil {
			t.Errorf("%q: %v", name, err)
		}
		db.Close()
		onlyFile(t, dir, name)
	}
}

// TestOpenNamesTheFile opens each name with dburl.Open, with both SQLite
// libraries: the file on disk is the file the URL names.
func TestOpenNamesTheFile(t *testing.T) {
	t.Parallel()
	for _, lib := range []string{"", "?library=modernc"} {
		for _, name := range sqliteNames {
			dir := t.TempDir()
			l, err := dburl.Open(context.Background(), "sqlite:"+filepath.Join(dir, name)+lib, nil)
			if err != nil {
				t.Errorf("%q%s: %v", name, lib, err)
				continue
			}
			l.Close()
			onlyFile(t, dir, name)
		}
	}
}

func TestSQLiteURIDoubleSlash(t *testing.T) {
	t.Parallel()
	if got := (dburl.URL{Driver: dburl.SQLite, Path: "//srv/x.db"}).SQLiteURI(); got != "file:////srv/x.db" {
		t.Errorf("SQLiteURI of //srv/x.db = %q", got)
	}
}
