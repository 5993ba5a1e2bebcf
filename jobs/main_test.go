package jobs_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
	"github.com/jackc/pgx/v5/stdlib"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain() // a re-executed worker process; never returns
	}
	pgtest.Main(m)
}

// drivers are the databases every test runs on, as subtests named after
// them so that `go test -v` shows which one ran.
var drivers = []string{"sqlite", "postgres"}

// env is one fresh database with the ledger open on it.
type env struct {
	driver string
	url    string
	l      *idem.Ledger
	db     *sql.DB
}

// forEachDriver runs fn as a subtest per driver.
func forEachDriver(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, name := range drivers {
		t.Run(name, func(t *testing.T) { fn(t, newEnv(t, name)) })
	}
}

func dbURL(t testing.TB, driver string) string {
	t.Helper()
	if driver == "postgres" {
		return pgtest.NewDB(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "idem.db") + "?synchronous=normal"
}

func newEnv(t testing.TB, driver string) *env {
	t.Helper()
	url := dbURL(t, driver)
	l := openLedger(t, url)
	e := &env{driver: driver, url: url, l: l, db: l.Driver().DB()}
	e.exec(t, `CREATE TABLE effects (job_id BIGINT NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL)`)
	return e
}

func openLedger(t testing.TB, url string) *idem.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// q turns '?' placeholders into the driver's own.
func (e *env) q(query string) string {
	if e.driver == "postgres" {
		return postgres.Rebind(query)
	}
	return query
}

func (e *env) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := e.db.Exec(e.q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(e.q(query), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// quietLogger drops everything below warnings unless IDEM_TEST_LOG=debug.
func quietLogger() *slog.Logger {
	switch os.Getenv("IDEM_TEST_LOG") {
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	case "":
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	default:
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// testArgs is the job type most tests use.
type testArgs struct {
	N int `json:"n"`
}

func (testArgs) Kind() string { return "test" }

// effectWorker writes one effect row per run and completes the job in the
// same transaction.
func effectWorker(worker string) jobs.Worker[testArgs] {
	return jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
		tx, err := j.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, rebindFor(j.DB(), `INSERT INTO effects (job_id, worker, attempt) VALUES (?, ?, ?)`),
			j.ID, worker, j.Attempt); err != nil {
			return err
		}
		if err := j.CompleteTx(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// rebindFor picks the placeholder style from the pool's driver.
func rebindFor(db *sql.DB, query string) string {
	if _, pg := db.Driver().(*stdlib.Driver); !pg {
		return query // either SQLite driver: mattn's (cgo) or modernc's
	}
	return postgres.Rebind(query)
}
