package idem_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// BenchmarkRunOverhead measures a three-step run (three transaction
// steps, each inserting a row) against the same three inserts in three
// hand-written transactions, alternating on one SQLite file, and reports
// the ratio of their times ("ratio") besides each one's time per op.
func BenchmarkRunOverhead(b *testing.B) {
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(b.TempDir(), "idem.db"), &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE rows (key TEXT NOT NULL, step INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	insert := func(ctx context.Context, tx *sql.Tx, key string, step int) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO rows (key, step) VALUES (?, ?)`, key, step)
		return err
	}
	var run, hand time.Duration
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		start := time.Now()
		_, err := l.Run(ctx, idem.Op{Key: key}, func(r *idem.Run) (idem.Result, error) {
			for s, name := range []string{"a", "b", "c"} {
				if _, err := idem.TxStep(r, name, func(ctx context.Context, tx *sql.Tx) (int, error) {
					return s, insert(ctx, tx, key, s)
				}); err != nil {
					return idem.Result{}, err
				}
			}
			return idem.Result{Status: 200}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		run += time.Since(start)

		start = time.Now()
		for s := range 3 {
			tx, err := l.DB().BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := insert(ctx, tx, "h"+key, s); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		hand += time.Since(start)
	}
	b.ReportMetric(float64(run.Nanoseconds())/float64(b.N), "run-ns/op")
	b.ReportMetric(float64(hand.Nanoseconds())/float64(b.N), "hand-ns/op")
	b.ReportMetric(float64(run)/float64(hand), "ratio")
}
