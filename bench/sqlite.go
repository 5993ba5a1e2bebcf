package bench

import (
	"context"
	"fmt"
	"net/url"

	"github.com/idemdev/idem/dburl"
)

// sqliteRows: claim+complete through the ledger on modernc.org/sqlite (pure
// Go) against the same on mattn/go-sqlite3 (cgo), same run, same
// durability, each on a file of its own. It runs on SQLite in a build with
// cgo, where both libraries are linked; elsewhere it has no rows.
func (r *runner) sqliteRows(ctx context.Context) ([]Result, error) {
	if r.db.driver != "sqlite" || r.db.shared || !dburl.SQLiteLibraries()["mattn"] {
		return nil, nil
	}
	var out []Result
	for _, c := range r.o.Concurrency {
		mattn, mattnScope, done, err := r.openLedger(ctx, nil)
		if err != nil {
			return out, err
		}
		modernc, moderncScope, done2, err := r.openLedgerURL(ctx, withLibrary("modernc"))
		if err != nil {
			done()
			return out, err
		}
		// One key sequence per side across the runs: a run that started
		// the keys again would find the last run's records.
		sides := []side{
			{name: "modernc", op: ledgerClaimComplete(modernc, moderncScope)},
			{name: "mattn", op: ledgerClaimComplete(mattn, mattnScope)},
		}
		row, err := r.medianRun(func(int) (Result, error) {
			r.progress("ledger claim+complete, %s: modernc.org/sqlite, mattn/go-sqlite3", callers(c))
			res, err := compare(ctx, c, r.o.Duration, sides...)
			if err != nil {
				return Result{}, err
			}
			return newResult(GroupSQLite, "ledger claim+complete on modernc.org/sqlite (pure Go)", "the same on mattn/go-sqlite3 (cgo)",
				r.db, c, r.o.Duration, res[0], res[1], true), nil
		})
		done2()
		done()
		if err != nil {
			return out, fmt.Errorf("sqlite libraries, %s: %w", callers(c), err)
		}
		out = append(out, row)
	}
	return out, nil
}

// withLibrary rewrites a sqlite: URL to open its file with lib.
func withLibrary(lib string) func(string) string {
	return func(s string) string {
		u, err := dburl.Parse(s)
		if err != nil {
			return s // Open reports it
		}
		if u.Options == nil {
			u.Options = url.Values{}
		}
		u.Options.Set("library", lib)
		return u.String()
	}
}
