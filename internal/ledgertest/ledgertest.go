// Package ledgertest opens ledgers for tests, on SQLite and on PostgreSQL
// (a database in the test binary's throwaway cluster, see internal/pgtest).
package ledgertest

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// Drivers are the drivers EachDriver runs on.
var Drivers = []string{"sqlite", "postgres"}

// Open opens a ledger on a fresh database of driver ("sqlite" or
// "postgres"), closed at the end of the test. Its logs are discarded.
func Open(t testing.TB, driver string) *idem.Ledger {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if driver == "postgres" {
		url = pgtest.NewDB(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// EachDriver runs fn against a fresh ledger on each driver, as parallel
// subtests named after the driver.
func EachDriver(t *testing.T, fn func(t *testing.T, l *idem.Ledger)) {
	t.Helper()
	for _, name := range Drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, name))
		})
	}
}

// Authenticated makes every request through next one authenticated
// caller's: a keyed request without a credential is refused by default
// (idemhttp.AnonymousRefuse). A request that sets Authorization, even to
// "", keeps what it set.
func Authenticated(next http.RoundTripper) http.RoundTripper { return authenticated{next} }

type authenticated struct{ next http.RoundTripper }

func (a authenticated) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, set := r.Header["Authorization"]; !set {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer test-client")
	}
	return a.next.RoundTrip(r)
}
