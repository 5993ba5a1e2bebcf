package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/outbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
	}
	pgtest.Main(m)
}

// forEachDriver runs fn as a subtest per database, named after it.
func forEachDriver(t *testing.T, fn func(t *testing.T, url string)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db") + "?synchronous=normal"
			if driver == "postgres" {
				url = pgtest.NewDB(t)
			}
			fn(t, url)
		})
	}
}

func openLedger(t testing.TB, url string) *idem.Ledger {
	t.Helper()
	l, err := dburl.Open(context.Background(), url, &idem.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func quietLogger() *slog.Logger {
	if os.Getenv("IDEM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastConfig retries quickly and notices dead relays quickly.
func fastConfig() *outbox.Config {
	return &outbox.Config{
		Lease: 500 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	}
}

func newOutbox(t testing.TB, l *idem.Ledger) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(l, fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// add commits m in its own transaction.
func add(t testing.TB, ob *outbox.Outbox, m outbox.Message) string {
	t.Helper()
	ctx := context.Background()
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	id, err := ob.Add(ctx, tx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
