package drivertest

import (
	"context"
	"testing"

	"github.com/idemdev/idem"
)

// testCloseTwice: closing a ledger again returns at once, and a claim
// after Close fails at once (even one that no context would end), with
// group commit on and off.
func testCloseTwice(t *testing.T, s *suite) {
	for _, batch := range []int{0, -1} {
		f := s.setup(t)
		l := f.open(&idem.Options{MaxBatch: batch})
		if _, err := l.Claim(f.ctx, idem.Op{Key: "k"}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		done := make(chan error)
		go func() {
			l.Close()
			_, err := l.Claim(context.WithoutCancel(f.ctx), idem.Op{Key: "k2"})
			done <- err
		}()
		var err error
		waitFor(t, "a second Close and a claim after it to return", func() bool {
			select {
			case err = <-done:
				return true
			default:
				return false
			}
		})
		if err == nil {
			t.Errorf("MaxBatch %d: a claim after Close succeeded", batch)
		}
	}
}

// testMigrate: the schema is applied on open, once, even by many openers
// at the same time; NoMigrate leaves a fresh database alone until Migrate.
func testMigrate(t *testing.T, s *suite) {
	t.Run("ConcurrentOpen", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		ledgers := make([]*idem.Ledger, 8)
		errs := make([]error, len(ledgers))
		race(len(ledgers), func(i int) { ledgers[i], errs[i] = f.openLedger(&idem.Options{Logger: testLogger()}) })
		for i, err := range errs {
			if err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
			defer ledgers[i].Close()
		}
		l := ledgers[0]
		var n int
		if err := l.Driver().DB().QueryRowContext(f.ctx, `SELECT count(*) FROM idem_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if migs := l.Driver().Migrations(); n != len(migs) || len(migs) == 0 {
			t.Fatalf("idem_migrations has %d rows for %d migrations", n, len(migs))
		}
		mustClaim(t, f.ctx, l, idem.Op{Key: "k"}, idem.Acquired)
		mustClaim(t, f.ctx, ledgers[7], idem.Op{Key: "k"}, idem.InFlight)
	})

	t.Run("NoMigrate", func(t *testing.T) {
		t.Parallel()
		f := s.setup(t)
		l := f.open(&idem.Options{NoMigrate: true})
		if c, err := l.Claim(f.ctx, idem.Op{Key: "k"}); err == nil {
			t.Fatalf("claim on a database without schema: %+v, want an error", c)
		}
		if added, err := l.Driver().Migrate(f.ctx); err != nil || len(added) != len(l.Driver().Migrations()) {
			t.Fatalf("Migrate on a database without schema: applied %d of %d, %v", len(added), len(l.Driver().Migrations()), err)
		}
		if added, err := l.Driver().Migrate(f.ctx); err != nil || len(added) != 0 {
			t.Fatalf("second Migrate: applied %d, %v; want none", len(added), err)
		}
		mustClaim(t, f.ctx, l, idem.Op{Key: "k"}, idem.Acquired)
	})
}
