// Package provetest runs idem prove scenarios from another package's
// tests, with that test binary as the prover's workers (its TestMain must
// run prove.WorkerMain when prove.IsWorker).
package provetest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/prove"
)

// Ops is how many messages one broker attack consumes.
const Ops = 40

// Broker runs scenario (a broker-redelivery variant) on SQLite and on
// PostgreSQL, where it must hold with exactly one effect per message, and
// once without the guard, where it must find duplicates.
func Broker(t *testing.T, scenario string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, db string, noGuard bool) prove.Result {
		// prove runs a trial that ends inconclusive (a broker fault) again
		// itself, up to three times in all.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		rep, err := prove.Run(ctx, prove.Config{
			DB: db, Scenarios: []string{scenario}, Ops: Ops, Workers: 2, Worker: []string{exe}, NoGuard: noGuard,
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var table bytes.Buffer
		prove.WriteTable(&table, rep)
		t.Logf("\n%s", table.String())
		if len(rep.Results) != 1 || rep.Results[0].Skipped {
			t.Fatalf("%s did not run", scenario)
		}
		r := rep.Results[0]
		if !noGuard {
			// The attack happened: both kinds of consumer crash, and the
			// broker restart while messages were still to be consumed.
			notes := strings.Join(r.Notes, "\n")
			if strings.Contains(notes, " 0 before-commit") || strings.Contains(notes, " 0 after-commit") || !strings.Contains(notes, "mid-run: true") {
				t.Errorf("%s: the attack did not happen in full: %s", scenario, notes)
			}
		}
		return r
	}
	// The three runs are independent (each its own broker, ports and
	// database) and mostly wait for boots and restarts: side by side.
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
			if driver == "postgres" {
				db = pgtest.NewDB(t)
			}
			r := run(t, db, false)
			if !r.OK || r.Effects != Ops || r.Duplicates != 0 || r.Lost != 0 || r.Unfinished != 0 {
				t.Fatalf("%s: ok=%v effects %d duplicates %d lost %d unfinished %d, want %d effects and no more",
					scenario, r.OK, r.Effects, r.Duplicates, r.Lost, r.Unfinished, Ops)
			}
		})
	}
	t.Run("noguard", func(t *testing.T) {
		t.Parallel()
		r := run(t, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), true)
		if r.OK || r.Duplicates == 0 {
			t.Fatalf("%s without the inbox: ok=%v with %d duplicates, want FAIL with duplicates", scenario, r.OK, r.Duplicates)
		}
	})
}
