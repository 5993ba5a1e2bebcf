package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv names the environment variable that, set to 1, turns "no
// PostgreSQL binaries" from a skip into a failure (set it in CI).
const RequireEnv = "IDEM_REQUIRE_POSTGRES"

var (
	mainUsed atomic.Bool
	dbSeq    atomic.Uint64

	shared struct {
		mu      sync.Mutex
		started bool // a start was attempted; err or c holds the outcome
		c       *Cluster
		err     error
	}
)

// Main runs the package's tests, then closes the shared cluster, then exits
// with the tests' status. Use it as
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Once the shared cluster has been started, SIGINT and SIGTERM also close it
// before the process dies of the signal. A process that never uses the
// shared cluster (say, a re-executed helper process) handles no signals.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain that has more to close: it
// runs the tests, closes the shared cluster and returns the tests' status.
func Run(m *testing.M) int {
	mainUsed.Store(true)
	code := m.Run()
	if err := closeShared(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: closing the shared PostgreSQL cluster: %v\n", err)
	}
	return code
}

// Shared returns the test binary's shared cluster, starting it on first use
// (with Options{TCP: true}). If the binaries are missing, it skips the test
// (fails it if IDEM_REQUIRE_POSTGRES=1); if the cluster could not start, it
// fails the test with the server log's tail. Tests that Stop or Restart it
// must not run in parallel with other tests using it.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	RequireBinaries(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		shared.c, shared.err = Start(ctx, &Options{TCP: true})
		cancel()
		if shared.err == nil {
			if mainUsed.Load() {
				closeOnSignal()
			} else {
				t.Logf("pgtest: TestMain does not call pgtest.Main, so the shared cluster in %s outlives this test binary until a later run reaps it", shared.c.dir)
			}
		}
	}
	if shared.err != nil {
		t.Fatalf("pgtest: starting the shared PostgreSQL cluster: %v", shared.err)
	}
	// An earlier test may have failed between Stop and Start: don't let
	// that fail every later test. (A no-op when it is running.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := shared.c.Start(ctx); err != nil {
		t.Fatalf("pgtest: restarting the shared PostgreSQL cluster: %v", err)
	}
	return shared.c
}

// RequireBinaries skips t when the PostgreSQL binaries are missing, or
// fails it if IDEM_REQUIRE_POSTGRES=1: for tests that start clusters of
// their own (Start, StartPair, a command that does) rather than use Shared.
func RequireBinaries(t testing.TB) {
	t.Helper()
	if _, ok := Available(); !ok {
		Missing(t, RequireEnv, "pgtest: PostgreSQL binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin")
	}
}

// Missing ends t for something it needs that is not installed: a skip
// saying msg, or a failure when the environment variable env is "1" (CI
// sets it, so that a test it needs cannot pass by skipping).
func Missing(t testing.TB, env, msg string) {
	t.Helper()
	if os.Getenv(env) == "1" {
		t.Fatalf("%s, and %s=1", msg, env)
	}
	t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, env)
}

// NewDB creates a fresh database with a unique name on the shared cluster
// and returns its URL (over the unix socket). The database is dropped in
// t.Cleanup, after cleanups the test registered later (close pools there or
// with defer). Skips and fails as Shared does.
func NewDB(t testing.TB) string {
	t.Helper()
	c := Shared(t)
	name := dbName(t.Name(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatalf("%v\nserver log (%s):\n%s", err, c.logFile, c.LogTail(30))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.dropDatabase(ctx, name); err != nil {
			t.Logf("pgtest: dropping database %s (ignored): %v", name, err)
		}
	})
	return url
}

// dbName makes "t_<sanitized test name>_<seq>", at most 63 bytes.
func dbName(testName string, seq uint64) string {
	var b strings.Builder
	underscore := true
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	s := strings.Trim(b.String(), "_")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "_")
	}
	return fmt.Sprintf("t_%s_%d", s, seq)
}

func closeShared() error {
	shared.mu.Lock()
	c := shared.c
	shared.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

// closeOnSignal closes the shared cluster on SIGINT or SIGTERM, then lets
// the signal kill the process as it would have.
func closeOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		closeShared()
		signal.Reset(sig)
		reraise(sig)
	}()
}

// roleSeq numbers the roles NewRole makes in this process.
var roleSeq atomic.Uint64

// NewRole makes a login role of its own for the test that owns nothing,
// grants it privileges (such as "SELECT, UPDATE, DELETE") on every table of
// dbURL's public schema, and returns dbURL as that role. The role is
// dropped in t.Cleanup, before a database NewDB made earlier.
func NewRole(t testing.TB, dbURL, privileges string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("idem_role_%d_%d", os.Getpid(), roleSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `GRANT ` + privileges + ` ON ALL TABLES IN SCHEMA public TO ` + role} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("pgtest: %s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Logf("pgtest: dropping role %s (ignored): %v", role, err)
			return
		}
		defer conn.Close(context.Background())
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Logf("pgtest: %s (ignored): %v", q, err)
			}
		}
	})
	u.User = url.User(role)
	return u.String()
}
