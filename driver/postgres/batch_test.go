package postgres

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/idemdev/idem/internal/groupcommit/gctest"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openGC opens a driver on url whose group commit records its batches.
func openGC(t *testing.T, url string) (*Driver, *gctest.Recorder) {
	t.Helper()
	d, err := testOpen(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rec := &gctest.Recorder{}
	d.gc.Close()
	commits := make([]func([]*groupcommit.Write), len(d.committers))
	for i, c := range d.committers {
		commits[i] = rec.Wrap(c.commit)
	}
	d.gc = groupcommit.NewWriter(d.ex, DefaultMaxBatch, batchWait, commits...)
	return d, rec
}

func TestGroupCommitFailingStatement(t *testing.T) {
	t.Parallel()
	d, rec := openGC(t, pgtest.NewDB(t))
	gctest.FailingStatement(t, d, rec, submit(d), `INSERT INTO idem_keys (scope, key) VALUES ($1, $2)`)
}

func TestGroupCommitRace(t *testing.T) {
	t.Parallel()
	d, _ := openGC(t, pgtest.NewDB(t))
	gctest.Race(t, d)
}

func TestGroupCommitCrash(t *testing.T) {
	if url := os.Getenv(gctest.ChildEnv); url != "" {
		d, err := testOpen(url)
		if err != nil {
			t.Fatal(err)
		}
		gctest.Child(d)
	}
	t.Parallel()
	url := pgtest.NewDB(t)
	gctest.Crash(t, url, "TestGroupCommitCrash", func(t *testing.T) driver.Driver {
		d, err := testOpen(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// TestGroupCommitLockWait: a caller whose claim must wait for another
// transaction (a ClaimTx of the same key, not yet committed) waits for it,
// and holds nobody else up: claims of other keys, in the same batches,
// are answered while that transaction stays open.
func TestGroupCommitLockWait(t *testing.T) {
	t.Parallel()
	d, _ := openGC(t, pgtest.NewDB(t))
	ctx := t.Context()
	params := func(key string, leaseID int64) driver.ClaimParams {
		return driver.ClaimParams{Scope: "wait", Key: key, Fingerprint: "fp", LeaseID: leaseID,
			Lease: time.Hour, Retention: time.Hour, TombstoneTTL: time.Hour}
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, created, err := d.Claim(ctx, driver.SQL(tx), params("held", 1)); err != nil || !created {
		t.Fatalf("claim in the open transaction: created=%v err=%v", created, err)
	}

	type answer struct {
		rec     idemtype.Record
		created bool
		err     error
	}
	held := make(chan answer, 1)
	start := make(chan struct{})
	go func() {
		<-start
		r, created, err := d.Claim(ctx, driver.Shared, params("held", 2))
		held <- answer{r, created, err}
	}()
	var wg sync.WaitGroup
	for round := range 20 {
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := fmt.Sprintf("free-%d-%d", round, i)
				if _, created, err := d.Claim(ctx, driver.Shared, params(key, int64(100+i))); err != nil || !created {
					t.Errorf("claim %s: created=%v err=%v", key, created, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait() // every other claim was answered while the transaction is open
	select {
	case a := <-held:
		t.Fatalf("the claim of a key held by an open transaction was answered before it ended: %+v", a)
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || a.created || a.rec.LeaseID != 1 {
		t.Fatalf("after the commit: created=%v lease %d err=%v; want the committed record (lease 1)", a.created, a.rec.LeaseID, a.err)
	}
}

// openTest opens a driver on a new database, closed when the test ends.
func openTest(t *testing.T) *Driver {
	t.Helper()
	d, err := testOpen(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// testOpen opens and sets up a driver on url.
func testOpen(url string) (*Driver, error) {
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		return nil, err
	}
	d := New(pool, &Options{ClosePool: true})
	if err := d.Setup(context.Background(), driver.Config{}); err != nil {
		pool.Close()
		return nil, err
	}
	return d, nil
}

// submit hands a write to d's group commit.
func submit(d *Driver) func(context.Context, *groupcommit.Write) error {
	return func(ctx context.Context, w *groupcommit.Write) error { return d.write(ctx, driver.Shared, w) }
}
