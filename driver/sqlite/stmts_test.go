package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/idemdev/idem/driver"
	_ "modernc.org/sqlite"
)

// stmtLibs are the database/sql SQLite libraries the writer's statement
// cache runs on: modernc.org/sqlite always, mattn/go-sqlite3 with cgo
// (stmts_mattn_test.go).
var stmtLibs = []string{"sqlite"}

// eachLib runs f with a writer on a new file, once per library.
func eachLib(t *testing.T, f func(t *testing.T, w *writer)) {
	for _, lib := range stmtLibs {
		t.Run(lib, func(t *testing.T) {
			db, err := sql.Open(lib, filepath.Join(t.TempDir(), "s.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			conn, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			w := newWriter(conn)
			t.Cleanup(func() {
				if err := w.close(); err != nil {
					t.Error(err)
				}
			})
			f(t, w)
		})
	}
}

func count(t *testing.T, ex driver.Executor, query string, args ...any) int {
	t.Helper()
	var n int
	if err := ex.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// A statement run again with other arguments runs its one prepared
// statement, and gives the right answers every time, in and out of a
// transaction.
func TestStmtsReuse(t *testing.T) {
	eachLib(t, func(t *testing.T, w *writer) {
		ctx := context.Background()
		if _, err := w.Exec(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		const ins = `INSERT INTO t (k, v) VALUES (?1, ?2)`
		for k := range 50 {
			tx, err := w.begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := tx.Exec(ctx, ins, k, fmt.Sprint("v", k)); err != nil || n != 1 {
				t.Fatalf("insert %d: %d rows, %v", k, n, err)
			}
			if k%2 == 0 {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, w, `SELECT count(*) FROM t`); n != 25 {
			t.Fatalf("%d rows, want the 25 committed", n)
		}
		// LIMIT ?1 + 0, as the writer's statements write it.
		for lim := range 5 {
			if n := count(t, w, `SELECT count(*) FROM (SELECT k FROM t ORDER BY k LIMIT ?1 + 0)`, lim); n != lim {
				t.Fatalf("LIMIT %d: %d rows", lim, n)
			}
		}
		if s := w.st.m[ins]; s == nil || s.busy {
			t.Fatalf("the insert is not cached, or still busy: %+v", s)
		}
		if err := w.QueryRow(ctx, `SELECT v FROM t WHERE k = ?1`, 1).Scan(new(string)); err != sql.ErrNoRows {
			t.Fatalf("a missing row: %v, want sql.ErrNoRows", err)
		}
	})
}

// A statement whose rows are still open runs again unprepared, with rows
// of its own: both sets are read whole and right.
func TestStmtsBusy(t *testing.T) {
	eachLib(t, func(t *testing.T, w *writer) {
		ctx := context.Background()
		tx, err := w.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		for k := range 10 {
			if _, err := tx.Exec(ctx, `INSERT INTO t (k) VALUES (?1)`, k); err != nil {
				t.Fatal(err)
			}
		}
		const q = `SELECT k FROM t WHERE k >= ?1 ORDER BY k`
		outer, err := tx.Query(ctx, q, 5)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for outer.Next() {
			var k int
			if err := outer.Scan(&k); err != nil {
				t.Fatal(err)
			}
			inner := 0
			rows, err := tx.Query(ctx, q, k)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				inner++
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if inner != 10-k {
				t.Fatalf("k >= %d inside the outer rows: %d rows, want %d", k, inner, 10-k)
			}
			got = append(got, k)
		}
		if err := outer.Close(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[5 6 7 8 9]" {
			t.Fatalf("outer rows %v", got)
		}
		if s := w.st.m[q]; s == nil || s.busy {
			t.Fatalf("the query is not cached, or still busy after Close: %+v", s)
		}
	})
}

// A script of several statements (a migration) runs whole: a prepared
// statement is one statement, and mattn/go-sqlite3's drops the rest.
func TestStmtsScript(t *testing.T) {
	eachLib(t, func(t *testing.T, w *writer) {
		ctx := context.Background()
		if _, err := w.Exec(ctx, "CREATE TABLE a (x);\nCREATE TABLE b (y);\nINSERT INTO b (y) VALUES (1);\n"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, w, `SELECT count(*) FROM b`); n != 1 {
			t.Fatalf("%d rows in b, want the script's 1", n)
		}
	})
}

// More texts than the cache holds: it is emptied and filled again, a
// statement busy when it is emptied is closed with its rows, and every
// answer is right.
func TestStmtsOverflow(t *testing.T) {
	eachLib(t, func(t *testing.T, w *writer) {
		ctx := context.Background()
		busy, err := w.st.query(ctx, `SELECT 1 UNION ALL SELECT 2`)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 * maxStmts {
			if n := count(t, w, fmt.Sprintf(`SELECT %d + ?1`, i), 1); n != i+1 {
				t.Fatalf("statement %d: %d", i, n)
			}
			if len(w.st.m) > maxStmts {
				t.Fatalf("%d statements cached, at most %d", len(w.st.m), maxStmts)
			}
		}
		n := 0
		for busy.Next() {
			n++
		}
		if err := busy.Close(); err != nil || n != 2 {
			t.Fatalf("the busy statement's rows: %d, %v", n, err)
		}
	})
}

// A PRAGMA runs unprepared each time (SQLite runs some when they are
// prepared), and each one sets and reads the current value.
func TestStmtsPragma(t *testing.T) {
	eachLib(t, func(t *testing.T, w *writer) {
		ctx := context.Background()
		for _, size := range []int{-4000, -2000, -4000} {
			if _, err := w.Exec(ctx, fmt.Sprintf(`PRAGMA cache_size = %d`, size)); err != nil {
				t.Fatal(err)
			}
			if got := count(t, w, `PRAGMA cache_size`); got != size {
				t.Fatalf("cache_size %d after setting %d", got, size)
			}
		}
		if _, err := w.Exec(ctx, `pragma cache_size = -2000`); err != nil {
			t.Fatal(err)
		}
		if got := count(t, w, ` PRAGMA cache_size`); got != -2000 {
			t.Fatalf("cache_size %d after a lower-case pragma set -2000", got)
		}
		if len(w.st.m) != 0 {
			t.Fatalf("%d PRAGMA statements kept prepared", len(w.st.m))
		}
	})
}
