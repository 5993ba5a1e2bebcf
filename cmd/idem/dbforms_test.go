package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem/internal/pgtest"
)

// TestDBFormsOnPostgres: --db takes a keyword string and postgresql://
// as well as postgres:// (issue 10 item 16; issue 11: keyword DSNs were
// refused as "has no scheme").
func TestDBFormsOnPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewDB(t) // skips without PostgreSQL binaries unless required
	u, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	kw := "host=" + q.Get("host") + " port=" + q.Get("port") + " user=" + u.User.Username() +
		" dbname=" + strings.TrimPrefix(u.Path, "/") + " sslmode=disable"
	r := opRun(t, "", "migrate", "--db", kw).must(t, 0)
	if !strings.Contains(r.stdout, "migrated postgres: applied") {
		t.Errorf("migrate with a keyword string: %q", r.stdout)
	}
	r = opRun(t, "", "migrate", "--db", "postgresql://"+strings.TrimPrefix(pg, "postgres://")).must(t, 0)
	if !strings.Contains(r.stdout, "nothing new") {
		t.Errorf("migrate with postgresql://: %q", r.stdout)
	}
	opRun(t, "", "keys", "list", "--db", kw).must(t, 0)
	opRun(t, "", "jobs", "list", "--db", pg).must(t, 0)
}

// TestDBFormsOnSQLite: sqlite, sqlite:PATH, sqlite://PATH and sqlite3:
// name the same file, and a name with % or # is the file named (issue 10
// item 14).
func TestDBFormsOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"p%41.db", "t1#x.db", "a b ü.db"} {
		path := filepath.Join(dir, name)
		opRun(t, "", "migrate", "--db", "sqlite:"+path).must(t, 0)
		for _, form := range []string{"sqlite:" + path, "sqlite://" + path, "sqlite3:" + path + "?synchronous=normal"} {
			opRun(t, "", "keys", "list", "--db", form).must(t, 0)
		}
	}
	onlyFiles(t, dir, "p%41.db", "t1#x.db", "a b ü.db")
}

// onlyFiles fails unless dir holds exactly the databases named (and their
// -wal and -shm files).
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n], want[n+"-wal"], want[n+"-shm"] = true, true, true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range ents {
		if !want[e.Name()] {
			t.Errorf("unexpected file %q", e.Name())
		}
		seen[e.Name()] = true
	}
	for _, n := range names {
		if !seen[n] {
			t.Errorf("no file %q", n)
		}
	}
}
