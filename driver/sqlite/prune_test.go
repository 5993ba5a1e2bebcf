package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// fillPrunable fills d with n completed records whose results were
// stored age ago, kept a minute and tombstoned for a minute more.
func fillPrunable(t *testing.T, d *Driver, n int, age time.Duration) {
	t.Helper()
	if _, err := d.FillCompleted(context.Background(), driver.FillParams{N: n, Scope: "s", Scopes: 3, Body: make([]byte, 1024),
		Retention: time.Minute, TombstoneTTL: time.Minute, Age: age}); err != nil {
		t.Fatal(err)
	}
}

// waitForWaiters waits until n callers are queued for d's writer.
func waitForWaiters(t *testing.T, d *Driver, n int64) {
	t.Helper()
	for i := 0; d.w.waiting.Load() != n; i++ {
		if i > 10_000 {
			t.Fatalf("%d callers waiting for the writer, want %d", d.w.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A prune batch gives the writer up between its steps to a caller waiting
// for it: a statement queued behind the pruner runs when the prune is
// partly done, not after the whole batch (the stall issue 14 measured: a
// batch of 1000 holding SQLite's one writer for 200 ms). After the prune
// the writer commits with the durability it had.
func TestPruneYieldsTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := tempDriver(t)
	const n = 500 // more than a first step's rows (firstPruneRows)
	fillPrunable(t, d, n, time.Hour)

	if err := d.w.lock(ctx); err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   idemtype.PruneCounts
		err error
	}
	pruned := make(chan result, 1)
	go func() {
		c, err := d.Prune(ctx, n)
		pruned <- result{c, err}
	}()
	waitForWaiters(t, d, 1) // the pruner, first in line
	left := make(chan int, 1)
	go func() {
		var k int
		if err := d.w.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&k); err != nil {
			t.Error(err)
		}
		left <- k
	}()
	waitForWaiters(t, d, 2) // the reader on the writer, second
	d.w.unlock()
	k := <-left
	r := <-pruned
	if r.err != nil {
		t.Fatal(r.err)
	}
	if k <= 0 || k >= n {
		t.Errorf("a statement queued behind the pruner saw %d of %d records left: want the prune partly done", k, n)
	}
	if r.c != (idemtype.PruneCounts{Tombstoned: n, Deleted: n}) {
		t.Errorf("prune: %+v, want %d tombstoned and deleted", r.c, n)
	}
	var sync int
	if err := d.w.QueryRow(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("synchronous %d after a prune (%v), want 2 (FULL)", sync, err)
	}
}

// A batch made of many small steps changes what one step would: records
// past both windows deleted, those past retention only tombstoned, in the
// order of their expiry, at most limit of each kind.
func TestPruneInSmallSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := tempDriver(t)
	fillPrunable(t, d, 30, time.Hour)      // past both windows
	fillPrunable(t, d, 40, 90*time.Second) // past retention only
	fillPrunable(t, d, 5, 10*time.Second)  // held
	for _, want := range []idemtype.PruneCounts{
		{Tombstoned: 50, Deleted: 30}, // 30 deleted at once, the 20 expiring next tombstoned
		{Tombstoned: 20},              // the rest tombstoned; none past its window yet
		{},
	} {
		d.w.pruneRows.Store(minPruneRows)
		got, err := d.Prune(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("prune: %+v, want %+v", got, want)
		}
	}
	var states []string
	rows, err := d.r.Query(ctx, `SELECT state || ':' || count(*) FROM idem_keys GROUP BY state ORDER BY state`)
	if err != nil {
		t.Fatal(err)
	}
	states, err = driver.ScanAll(rows, func(r driver.Row) (string, error) {
		var s string
		return s, r.Scan(&s)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[0] != "succeeded:5" || states[1] != "tombstone:40" {
		t.Errorf("states after pruning: %v, want succeeded:5 tombstone:40", states)
	}
}

// tempDriver opens a driver on a file of the test's own, closed at its end.
func tempDriver(t *testing.T) *Driver {
	t.Helper()
	d, err := testOpen(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// A paced prune takes its next step only once the writer is idle: while
// another caller holds it, the step waits past the pause its duty asks
// for, and goes as soon as the writer has been free for pruneQuiet.
func TestPacedPruneWaitsForAnIdleWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := tempDriver(t)
	if err := d.w.lock(ctx); err != nil {
		t.Fatal(err)
	}
	yielded := make(chan error, 1)
	// A step of 100 ms at duty 0.5 pauses 100 ms, and may wait up to a
	// second (the floor's share, 0.1, capped) for an idle writer.
	go func() { yielded <- d.yieldToOthers(ctx, 100*time.Millisecond, 0.5) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-yielded:
		d.w.unlock()
		t.Fatalf("the prune's next step went while another caller held the writer (%v)", err)
	default:
	}
	d.w.unlock()
	select {
	case err := <-yielded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the prune's next step never went once the writer was free")
	}
}

// Under load that never leaves the writer idle, a paced prune still runs
// (at its floor's share) and finishes: it yields, it does not starve.
func TestPacedPruneFinishesUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := tempDriver(t)
	const n = 400
	fillPrunable(t, d, n, time.Hour)
	stop := make(chan struct{})
	loaded := make(chan int, 1)
	go func() {
		writes := 0
		for {
			select {
			case <-stop:
				loaded <- writes
				return
			default:
			}
			// Writes back to back: the writer is never idle for pruneQuiet.
			if _, err := d.w.Exec(ctx, takeWriteLock); err != nil {
				t.Error(err)
				loaded <- writes
				return
			}
			writes++
		}
	}()
	got, err := d.PrunePaced(ctx, n, 0.5)
	close(stop)
	writes := <-loaded
	if err != nil {
		t.Fatalf("prune under steady load: %v (after %+v)", err, got)
	}
	if got != (idemtype.PruneCounts{Tombstoned: n, Deleted: n}) {
		t.Errorf("prune under load: %+v, want %d tombstoned and deleted", got, n)
	}
	if writes == 0 {
		t.Error("no write of the load ran while the prune did")
	}
}

// A paced prune copies the pages it wrote from the WAL into the database
// file itself, in the pause after each step, without the writer: with the
// writer's automatic checkpoint off, the WAL starts over after every step
// and stays about a step long. Against it, the same prune while a reader
// holds a snapshot from before it, which no checkpoint may copy past: its
// WAL holds every step.
func TestPacedPruneCheckpointsBetweenSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 2000
	walAfter := func(pinned bool) int64 {
		path := filepath.Join(t.TempDir(), "idem.db")
		d, err := testOpen(path)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		fillPrunable(t, d, n, time.Hour)
		for _, q := range []string{`PRAGMA wal_checkpoint(TRUNCATE)`, `PRAGMA wal_autocheckpoint = 0`} {
			if _, err := d.w.Exec(ctx, q); err != nil {
				t.Fatal(q, err)
			}
		}
		if pinned {
			tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var k int
			if err := tx.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&k); err != nil {
				t.Fatal(err)
			}
		}
		c, err := d.PrunePaced(ctx, n, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		if c.Deleted != n {
			t.Fatalf("deleted %d of %d records", c.Deleted, n)
		}
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	free, pinned := walAfter(false), walAfter(true)
	if free > pinned/2 {
		t.Errorf("WAL after a paced prune of %d records: %d bytes, against %d with a reader pinning it: want it copied out between steps", n, free, pinned)
	}
}
