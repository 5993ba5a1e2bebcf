package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/drivertest"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bouncerURL starts PgBouncer in mode in front of a fresh database and
// returns its URL as idem should be given it: with pooler=transaction in
// transaction mode.
func bouncerURL(t testing.TB, mode pgtest.PoolMode) string {
	_, url := pgtest.NewPgBouncer(t, mode)
	if mode == pgtest.TransactionPooling {
		url += "&pooler=transaction"
	}
	return url
}

// bouncerDriver opens a ledger (its tables migrated) through a PgBouncer
// of its own in mode, closed when the test ends, and returns its driver.
func bouncerDriver(t *testing.T, ctx context.Context, mode pgtest.PoolMode) *postgres.Driver {
	t.Helper()
	drv, err := dburl.OpenDriver(ctx, bouncerURL(t, mode))
	if err != nil {
		t.Fatal(err)
	}
	l, err := idem.New(ctx, drv, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return drv.(*postgres.Driver)
}

// The conformance cases run through PgBouncer (all of them pass; these
// bound the run's time): the races of goroutines and of processes, crashes
// and pauses of child processes, and every kind of write (claim,
// heartbeat, finish, group commit, the caller's transaction, Do's,
// migrations from concurrent openers, the sweep and its VACUUM). Session mode is PostgreSQL's own
// session end to end, so it runs the races only.
var (
	sessionCases     = []string{"ClaimRace", "DoRace", "ProcessRace", "ClaimTx"}
	transactionCases = []string{"ClaimRace", "DoRace", "ProcessRace", "Crash", "PausedHolder", "Heartbeat",
		"ClaimTx", "Do", "Migrate", "PruneBatches"}
)

// bouncerTargets are the driver through PgBouncer, opened as the CLI opens
// a URL (dburl), in each pool mode.
var bouncerTargets = []drivertest.Target{
	{
		Name:  "pgbouncer-session",
		NewDB: func(t testing.TB) string { return bouncerURL(t, pgtest.SessionPooling) },
		Open:  dburl.OpenDriver,
		Cases: sessionCases,
	},
	{
		Name:  "pgbouncer-transaction",
		NewDB: func(t testing.TB) string { return bouncerURL(t, pgtest.TransactionPooling) },
		Open:  dburl.OpenDriver,
		Cases: transactionCases,
	},
}

// TestPgBouncer runs the ledger's conformance cases through PgBouncer in
// session and in transaction pooling mode.
func TestPgBouncer(t *testing.T) {
	for _, tg := range bouncerTargets {
		drivertest.Run(t, tg)
	}
}

// In transaction mode without pooler=transaction, pgx's statement cache
// would fail at random under load: opening fails at once, with an error
// that names the option. An application's own pool that runs statements
// unnamed, with Options.TransactionPooling, works.
func TestPgBouncerTransactionModeNeedsTheOption(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewPgBouncer(t, pgtest.TransactionPooling)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dburl.Open(ctx, url, nil)
	if err == nil {
		l.Close()
		t.Fatal("opened through PgBouncer in transaction mode with pgx's statement cache")
	}
	if !strings.Contains(err.Error(), "pooler=transaction") || !strings.Contains(err.Error(), "transaction mode") {
		t.Fatalf("error %q does not say what to do", err)
	}
	t.Logf("without the option: %v", err)

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err = idem.New(ctx, postgres.New(pool, &postgres.Options{ClosePool: true, TransactionPooling: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	op := idem.Op{Scope: "s", Key: "k", Fingerprint: "f"}
	for i := range 3 {
		res, err := l.Do(ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return []byte("once"), nil })
		if err != nil || string(res.Body) != "once" || res.Replayed != (i > 0) {
			t.Fatalf("Do #%d: %+v, %v", i, res, err)
		}
	}
}

// LISTEN through PgBouncer: in session mode a notice sent on another
// connection arrives; in transaction mode the driver does not pretend
// (ErrUnsupported: job workers poll), and a notice costs nothing but is
// still sent, for listeners connected directly.
func TestPgBouncerListen(t *testing.T) {
	for _, mode := range []pgtest.PoolMode{pgtest.SessionPooling, pgtest.TransactionPooling} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := bouncerDriver(t, ctx, mode)
			ready := make(chan struct{})
			woken := make(chan string, 10)
			ended := make(chan error, 1)
			lctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() { ended <- d.ListenJobs(lctx, func() { close(ready) }, func(q string) { woken <- q }) }()
			if mode == pgtest.TransactionPooling {
				if err := <-ended; !errors.Is(err, errors.ErrUnsupported) {
					t.Fatalf("ListenJobs in transaction mode: %v, want ErrUnsupported", err)
				}
				if err := d.NotifyJobs(ctx, driver.Shared, []string{"email"}); err != nil {
					t.Fatal(err)
				}
				return
			}
			select {
			case <-ready:
			case err := <-ended:
				t.Fatalf("listen: %v", err)
			}
			tx, err := d.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.NotifyJobs(ctx, driver.SQL(tx), []string{"email"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			select {
			case q := <-woken:
				if q != "email" {
					t.Fatalf("woken for %q", q)
				}
			case <-ctx.Done():
				t.Fatal("the notice never arrived through PgBouncer in session mode")
			}
			stop()
			<-ended
		})
	}
}

// Group commit works through PgBouncer: PgBouncer refuses lock_timeout as
// a startup parameter, and the committers then connect without it and set
// it per batch, instead of every write falling back to the pool.
func TestPgBouncerGroupCommit(t *testing.T) {
	for _, mode := range []pgtest.PoolMode{pgtest.SessionPooling, pgtest.TransactionPooling} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			url := bouncerURL(t, mode)
			l, err := dburl.Open(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					for k := range 5 {
						c, err := l.Claim(ctx, idem.Op{Scope: "s", Key: fmt.Sprint(i, "-", k), Fingerprint: "f"})
						if err == nil {
							err = l.Complete(ctx, c, idem.Result{Status: 200})
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			u, err := dburl.Parse(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := pgx.ParseConfig(u.ConnString)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, pgtest.Shared(t).URL("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'idem group commit'`,
				cfg.Database).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("no group-commit connection reached PostgreSQL through PgBouncer")
			}
		})
	}
}
