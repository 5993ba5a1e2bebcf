package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sweeps that come faster than autovacuum: each cycle fills the ledger and
// prunes every record. Without a VACUUM between a prune and the next fill,
// the fill cannot reuse the deleted rows' space and the table grows by a
// fill each cycle; with VacuumLedger after each prune it stays the size of
// one fill.
func TestVacuumLedgerReusesSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	const n = 20_000
	body := []byte(strings.Repeat("x", 1024))
	cycle := func(vacuum bool) int64 {
		t.Helper()
		if _, err := d.FillCompleted(ctx, driver.FillParams{N: n, Scope: "s", Scopes: 8, Body: body,
			Retention: time.Minute, TombstoneTTL: time.Minute, Age: time.Hour}); err != nil {
			t.Fatal(err)
		}
		filled, err := d.LedgerSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for {
			c, err := d.Prune(ctx, 5000)
			if err != nil {
				t.Fatal(err)
			}
			if c.Deleted == 0 {
				break
			}
		}
		if vacuum {
			if err := d.VacuumLedger(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return filled.Ledger
	}
	first := cycle(true)
	var sizes []int64
	for range 2 {
		sizes = append(sizes, cycle(true))
	}
	for i, s := range sizes {
		// A fill into a vacuumed table reuses its pages; a fill into an
		// unvacuumed one doubles it (measured: 2.0× and 3.0×).
		if float64(s) > 1.25*float64(first) {
			t.Errorf("after fill %d the ledger is %d bytes, %.2f× the first fill's %d: the vacuumed space was not reused",
				i+2, s, float64(s)/float64(first), first)
		}
	}
	t.Logf("ledger after each fill, with VacuumLedger after each prune: %d, %v bytes", first, sizes)
}

// A role that may use the ledger but not vacuum its table gets an error
// naming what it lacks, rather than the warning PostgreSQL would print and
// the skipped pass.
func TestVacuumLedgerRefusedWithoutTheRight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDB(t)
	owner, err := testOpen(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := owner.VacuumLedger(ctx); err != nil {
		t.Fatalf("the owner's vacuum: %v", err)
	}
	pool, err := pgxpool.New(ctx, pgtest.NewRole(t, dbURL, "SELECT, INSERT, UPDATE, DELETE"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = New(pool, nil).VacuumLedger(ctx)
	if err == nil || !strings.Contains(err.Error(), "may not vacuum idem_keys") {
		t.Fatalf("a non-owner's vacuum: %v, want it refused", err)
	}
}
