package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// A ledger on a multi-host URL (primary, synchronous standby,
// target_session_attrs=read-write) across a failover: operations whose
// commit waits for the standby when the primary dies end with an error
// that claims nothing (idem.ErrOutcomeUnknown when it was sent, else a
// connection error; never another sentinel); after the
// standby is promoted the same ledger, never reopened, retries them with
// the same keys and runs new ones; every acknowledged operation survives,
// none has two effects; the jobs listener ends on the dead primary and
// listens again on the new one.
func TestFailover(t *testing.T) {
	pgtest.RequireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pair, err := pgtest.StartPair(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	url, err := pair.CreateDatabase(ctx, "failover")
	if err != nil {
		t.Fatal(err)
	}
	// A lease long enough that a loaded machine (-race, two cores) keeps
	// it through a whole operation: the stranded claims wait it out once.
	l, err := dburl.Open(ctx, url, &idem.Options{Lease: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	db := l.Driver().DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	do := func(ctx context.Context, key string) error {
		_, err := l.Do(ctx, idem.Op{Scope: "failover", Key: key}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES ($1)", key)
			return []byte(key), err
		})
		return err
	}
	var acked []string
	for i := range 5 {
		key := fmt.Sprintf("before-%d", i)
		if err := do(ctx, key); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, key)
	}

	listenErr := make(chan error, 1)
	woken := make(chan string, 8)
	listen := func() {
		ready := make(chan struct{})
		go func() {
			listenErr <- l.Driver().ListenJobs(ctx, func() { close(ready) }, func(q string) { woken <- q })
		}()
		select {
		case <-ready:
		case err := <-listenErr:
			t.Fatalf("listen: %v", err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := l.Driver().Executor(tx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Driver().NotifyJobs(ctx, ex, []string{"q"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if q := <-woken; q != "q" {
			t.Fatalf("woken for %q", q)
		}
	}
	listen()

	// Strand commits on the primary: with the WAL sender paused, each
	// waits for the synchronous standby.
	resume, err := pair.PauseWALSender()
	if err != nil {
		t.Fatal(err)
	}
	defer resume()
	const inFlight = 24
	errs := make([]error, inFlight)
	var wg sync.WaitGroup
	for i := range inFlight {
		wg.Go(func() { errs[i] = do(ctx, fmt.Sprintf("during-%d", i)) })
	}
	admin, err := pgx.Connect(ctx, pair.Primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for waiting := 0; waiting == 0; {
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	admin.Close(ctx)
	if err := pair.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	unknown := 0
	for i, err := range errs {
		if errors.Is(err, idem.ErrOutcomeUnknown) {
			unknown++
		}
		if err == nil {
			t.Errorf("during-%d acknowledged although no commit could reach the standby", i)
			continue
		}
		for _, known := range []error{idem.ErrLeaseLost, idem.ErrInFlight, idem.ErrMismatch, idem.ErrParked, idem.ErrExpired, idem.ErrFailed, idem.ErrInvalid} {
			if errors.Is(err, known) {
				t.Errorf("during-%d: a connection lost mid-commit reported as %v: %v", i, known, err)
			}
		}
		t.Logf("during-%d: %v", i, err)
	}
	// At least one write was waiting for the standby when the primary
	// died: it was sent, so its error must say the outcome is unknown.
	if unknown == 0 {
		t.Error("no in-flight operation ended with idem.ErrOutcomeUnknown")
	}
	select {
	case err := <-listenErr:
		if err == nil {
			t.Fatal("the listener ended without an error")
		}
	case <-ctx.Done():
		t.Fatal("the listener did not notice the primary's death")
	}

	if err := pair.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// The same ledger: retries with the same keys, and new operations.
	for i := range inFlight {
		key := fmt.Sprintf("during-%d", i)
		for {
			err := do(ctx, key)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never settled after the failover: %v", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		acked = append(acked, key, "after-"+key)
		if err := do(ctx, "after-"+key); err != nil {
			t.Fatalf("a new operation on the promoted standby: %v", err)
		}
	}
	listen()

	counts := map[string]int{}
	rows, err := db.QueryContext(ctx, "SELECT key FROM effects")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		counts[k]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range acked {
		if counts[k] != 1 {
			t.Errorf("%s: %d effects, want 1", k, counts[k])
		}
	}
	if len(counts) != len(acked) {
		t.Errorf("%d keys with effects, want %d", len(counts), len(acked))
	}
}
