// Package drivertest is the conformance suite every idem driver must pass.
// A driver is done when Run passes against it; behaviour that differs
// between databases is a bug or a documented exception (a case that does not
// apply says so with t.Skip).
//
// It takes a driver as a value, so a driver written outside this module
// proves itself the same way. A driver's test package uses it like this:
//
//	var target = drivertest.Target{
//		Name:  "sqlite",
//		NewDB: func(t testing.TB) string { return filepath.Join(t.TempDir(), "idem.db") },
//		Open: func(ctx context.Context, db string) (driver.Driver, error) {
//			h, err := sql.Open("sqlite", "file:"+db+"?_txlock=immediate")
//			if err != nil {
//				return nil, err
//			}
//			return sqlite.New(h, &sqlite.Options{CloseDB: true}), nil
//		},
//	}
//
//	func TestMain(m *testing.M) { drivertest.Main(m, target) }
//
//	func TestConformance(t *testing.T) { drivertest.Run(t, target) }
//
// Main is required: several cases re-execute the test binary as a child
// process (racing processes, SIGKILL at a crash point, SIGSTOP past a lease),
// and Main runs the child's role, on the target it names, instead of the
// tests.
//
// Every case opens its ledgers with idem.New on drivers that Target.Open
// makes on a fresh database, so the suite tests what users get, not driver
// internals. Most
// cases move time with an injected clock (idem.Options.Clock); the few that
// need the real database clock wait on it by polling the record, never by
// asserting wall-clock durations. Randomized cases log their seed; set
// IDEM_TEST_SEED to replay one (rapid's own -rapid.seed for the model).
package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
)

// SeedEnv names the environment variable that fixes the seed of the
// randomized cases.
const SeedEnv = "IDEM_TEST_SEED"

// LogEnv, set to 1, sends the ledgers' logs to stderr instead of discarding
// them.
const LogEnv = "IDEM_TEST_LOG"

// Main is the TestMain of a driver's test package. In a child process
// started by the suite it runs the child's role and exits; otherwise it runs
// the tests through pgtest.Main, which closes the shared PostgreSQL cluster
// if one was started.
func Main(m *testing.M, targets ...Target) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role, targets))
	}
	pgtest.Main(m)
}

// Target is a driver under test.
type Target struct {
	// Name labels the subtests (TestConformance/sqlite/ClaimRace) and tells
	// a child process which target to open.
	Name string
	// NewDB returns the name of a fresh, empty database (a path, a URL:
	// whatever Open takes), one per case. Several drivers, in this process
	// and in child processes, open it at once.
	NewDB func(t testing.TB) string
	// Open makes a driver on db, not yet set up (idem.New sets it up),
	// that releases what it opened when closed.
	Open func(ctx context.Context, db string) (driver.Driver, error)
	// Cases, when set, runs only the cases with these names: for a target
	// that varies another already run in full (the same driver through a
	// connection pooler).
	Cases []string
}

// openLedger opens a ledger on db through the target's driver.
func (tg Target) openLedger(ctx context.Context, db string, opts *idem.Options) (*idem.Ledger, error) {
	drv, err := tg.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	l, err := idem.New(ctx, drv, opts)
	if err != nil {
		drv.Close()
		return nil, err
	}
	return l, nil
}

// suite is one driver under test.
type suite struct {
	target Target
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

// cases is the whole suite, in the order go test -v lists it.
var cases = []testCase{
	{"ClaimRace", testClaimRace},
	{"DoRace", testDoRace},
	{"ProcessRace", testProcessRace},
	{"LeaseExpiry", testLeaseExpiry},
	{"LeaseExpiryDatabaseClock", testLeaseExpiryDatabaseClock},
	{"Heartbeat", testHeartbeat},
	{"Crash", testCrash},
	{"PausedHolder", testPausedHolder},
	{"Mismatch", testMismatch},
	{"ScopeIsolation", testScopeIsolation},
	{"Retention", testRetention},
	{"TombstoneDisabled", testTombstoneDisabled},
	{"PruneBatches", testPruneBatches},
	{"PruneSpares", testPruneSpares},
	{"PruneReleased", testPruneReleased},
	{"PruneMixed", testPruneMixed},
	{"StalePolicy", testStalePolicy},
	{"Release", testRelease},
	{"Fail", testFail},
	{"Do", testDo},
	{"BadInput", testBadInput},
	{"ClaimTx", testClaimTx},
	{"Resolve", testResolve},
	{"List", testList},
	{"Migrate", testMigrate},
	{"Model", testModel},
	{"CloseTwice", testCloseTwice},
	{"Fill", testFill},
	{"Offsets", testOffsets},
	{"Steps", testSteps},
	{"StepResolve", testStepResolve},
	{"Activity", testActivity},
}

// Run runs the conformance suite against one driver.
func Run(t *testing.T, tg Target) {
	s := &suite{target: tg}
	t.Run(tg.Name, func(t *testing.T) {
		for _, c := range cases {
			if tg.Cases != nil && !slices.Contains(tg.Cases, c.name) {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, s)
			})
		}
	})
}

// fixture is one case's database.
type fixture struct {
	t      *testing.T
	target Target
	db     string
	ctx    context.Context
}

func (s *suite) setup(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, target: s.target, db: s.target.NewDB(t), ctx: t.Context()}
}

// openLedger opens a ledger on the fixture's database.
func (f *fixture) openLedger(opts *idem.Options) (*idem.Ledger, error) {
	return f.target.openLedger(f.ctx, f.db, opts)
}

// open opens a ledger on the fixture's database, closed at cleanup.
func (f *fixture) open(opts *idem.Options) *idem.Ledger {
	f.t.Helper()
	o := idem.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = testLogger()
	}
	l, err := f.openLedger(&o)
	if err != nil {
		f.t.Fatalf("open %s: %v", f.db, err)
	}
	f.t.Cleanup(func() { l.Close() })
	return l
}

func testLogger() *slog.Logger {
	if os.Getenv(LogEnv) == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// t0 is where every injected clock starts: whole seconds, so that SQLite's
// milliseconds and PostgreSQL's microseconds hold it exactly.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is an injected clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// fixedClock returns a clock stuck at t, for child processes.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// newRand returns a seeded source and logs the seed (IDEM_TEST_SEED
// overrides it).
func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, v, err)
		}
		seed = s
	}
	t.Logf("seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// rebind turns '?' placeholders into the driver's own.
func rebind(l *idem.Ledger, q string) string {
	if l.Driver().Name() == "postgres" {
		return postgres.Rebind(q)
	}
	return q
}

// The effects table stands for the business write a user commits together
// with the done mark. It has no unique constraint on purpose: a duplicated
// effect must show up as two rows, not as an error.
const effectsDDL = `CREATE TABLE IF NOT EXISTS effects (
	scope   TEXT   NOT NULL,
	key     TEXT   NOT NULL,
	attempt BIGINT NOT NULL,
	pid     BIGINT NOT NULL
)`

func createEffects(t testing.TB, l *idem.Ledger) {
	t.Helper()
	if _, err := l.DB().ExecContext(context.Background(), effectsDDL); err != nil {
		t.Fatalf("create effects: %v", err)
	}
}

// insertEffect writes one effect row inside q (the caller's transaction).
func insertEffect(ctx context.Context, l *idem.Ledger, q driver.Querier, scope, key string, attempt int64) error {
	_, err := q.ExecContext(ctx, rebind(l, `INSERT INTO effects (scope, key, attempt, pid) VALUES (?, ?, ?, ?)`),
		scope, key, attempt, os.Getpid())
	return err
}

// effects counts effect rows by key within scope.
func effects(t testing.TB, l *idem.Ledger, scope string) map[string]int {
	t.Helper()
	rows, err := l.DB().QueryContext(context.Background(),
		rebind(l, `SELECT key, count(*) FROM effects WHERE scope = ? GROUP BY key`), scope)
	if err != nil {
		t.Fatalf("count effects: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatalf("count effects: %v", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return out
}

// rowCount counts the ledger's rows directly, not through List.
func rowCount(t testing.TB, l *idem.Ledger) int {
	t.Helper()
	var n int
	if err := l.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatalf("count idem_keys: %v", err)
	}
	return n
}

// begin starts a user transaction on the ledger's database.
func begin(t testing.TB, ctx context.Context, l *idem.Ledger) *sql.Tx {
	t.Helper()
	tx, err := l.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	return tx
}

// mustClaim claims op and fails the test unless the outcome is want.
func mustClaim(t testing.TB, ctx context.Context, l *idem.Ledger, op idem.Op, want idem.Outcome) *idem.Claim {
	t.Helper()
	c, err := l.Claim(ctx, op)
	if err != nil {
		t.Fatalf("claim %q/%q: %v", op.Scope, op.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("claim %q/%q: outcome %v (record %s attempt %d), want %v", op.Scope, op.Key, c.Outcome, c.Record.State, c.Record.Attempt, want)
	}
	return c
}

func mustGet(t testing.TB, ctx context.Context, l *idem.Ledger, scope, key string) idemtype.Record {
	t.Helper()
	r, err := l.Get(ctx, scope, key)
	if err != nil {
		t.Fatalf("get %q/%q: %v", scope, key, err)
	}
	return r
}

// completeWithEffect is the transaction-bound way to finish a held claim:
// the effect row and the done mark commit together.
func completeWithEffect(ctx context.Context, l *idem.Ledger, c *idem.Claim, r idem.Result) error {
	tx, end, err := l.Driver().Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	defer tx.Rollback()
	if err := insertEffect(ctx, l, tx, c.Op.Scope, c.Op.Key, c.Token); err != nil {
		return fmt.Errorf("insert effect: %w", err)
	}
	if err := l.CompleteTx(ctx, tx, c, r); err != nil {
		return err
	}
	return tx.Commit()
}

// waitFor polls cond (a database read, typically) until it holds. It is a
// guard against hangs, not a timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
