package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// A collector is registered once and handed to the ledger as its
// observer; CountFrom adds the gauges counted in the database on scrape.
func Example() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	m := metrics.New("sqlite")
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(m)
	reg.MustRegister(m)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), &idem.Options{
		Observer: m.Observer(),
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	m.CountFrom(l, nil)

	op := idem.Op{Key: "order-42", Fingerprint: "f"}
	send := func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return []byte("sent"), nil }
	for range 3 { // one run, two retries
		if _, err := l.Do(ctx, op, send); err != nil {
			panic(err)
		}
	}
	t := m.Totals()
	fmt.Println("acquired:", t.Claims["acquired"], "duplicates prevented:", t.DuplicatesPrevented)
	// Output: acquired: 1 duplicates prevented: 2
}
