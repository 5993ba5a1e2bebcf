package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type env struct {
	driver, url string
	l           *idem.Ledger
	in          *inbox.Inbox
}

func forEachDriver(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db") + "?synchronous=normal"
			if driver == "postgres" {
				url = pgtest.NewDB(t)
			}
			e := &env{driver: driver, url: url}
			e.l, e.in = e.open(t)
			e.exec(t, `CREATE TABLE effects (message_id TEXT NOT NULL, body TEXT NOT NULL)`)
			e.exec(t, `CREATE TABLE offsets (part INTEGER PRIMARY KEY, next BIGINT NOT NULL)`)
			fn(t, e)
		})
	}
}

func (e *env) open(t *testing.T) (*idem.Ledger, *inbox.Inbox) {
	t.Helper()
	l, err := dburl.Open(context.Background(), e.url, &idem.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	in, err := inbox.New(l, &inbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return l, in
}

func (e *env) q(s string) string {
	if e.driver == "postgres" {
		return postgres.Rebind(s)
	}
	return s
}

func (e *env) exec(t *testing.T, s string, args ...any) {
	t.Helper()
	if _, err := e.in.DB().Exec(e.q(s), args...); err != nil {
		t.Fatal(err)
	}
}

func (e *env) count(t *testing.T, s string, args ...any) int {
	t.Helper()
	var n int
	if err := e.in.DB().QueryRow(e.q(s), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// effect writes one effect row for the message with tx.
func (e *env) effect(id string, body []byte) func(tx *sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.Exec(e.q(`INSERT INTO effects (message_id, body) VALUES (?, ?)`), id, string(body))
		return err
	}
}

func TestSequentialRedeliveryIsANoOp(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i := range 3 {
			dup, err := e.in.Process(ctx, "orders", "m-1", []byte(`{"a":1}`), e.effect("m-1", []byte(`{"a":1}`)))
			if err != nil || dup != (i > 0) {
				t.Fatalf("delivery %d: duplicate=%v err=%v", i+1, dup, err)
			}
		}
		// Another source is another id space.
		if dup, err := e.in.Process(ctx, "payments", "m-1", []byte(`x`), e.effect("m-1", []byte(`x`))); err != nil || dup {
			t.Fatalf("same id from another source: duplicate=%v err=%v", dup, err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 2 {
			t.Fatalf("effects = %d, want 2", n)
		}
	})
}

// Deliveries of one message racing on separate connections apply it once.
func TestConcurrentRedeliveryAppliesOnce(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		const pools, each = 4, 4
		var inboxes []*inbox.Inbox
		for range pools {
			_, in := e.open(t)
			inboxes = append(inboxes, in)
		}
		start := make(chan struct{})
		var fresh, dups atomic.Int32
		var wg sync.WaitGroup
		for _, in := range inboxes {
			for range each {
				wg.Go(func() {
					<-start
					dup, err := in.Process(context.Background(), "orders", "m-7", []byte("p"), e.effect("m-7", []byte("p")))
					switch {
					case err != nil:
						t.Error(err)
					case dup:
						dups.Add(1)
					default:
						fresh.Add(1)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if fresh.Load() != 1 || dups.Load() != pools*each-1 {
			t.Fatalf("%d applied, %d duplicates; want 1 and %d", fresh.Load(), dups.Load(), pools*each-1)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
	})
}

// A redelivery waiting on a first delivery that then fails is not
// swallowed: it runs fn itself.
func TestRedeliveryAfterFailedFirstRuns(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		_, other := e.open(t)
		inFn, fail := make(chan struct{}), make(chan struct{})
		firstErr := make(chan error, 1)
		go func() {
			_, err := e.in.Process(ctx, "orders", "m-9", []byte("p"), func(tx *sql.Tx) error {
				if err := e.effect("m-9", []byte("first"))(tx); err != nil {
					return err
				}
				close(inFn)
				<-fail
				return errors.New("downstream failed")
			})
			firstErr <- err
		}()
		<-inFn
		second := make(chan bool, 1)
		go func() {
			dup, err := other.Process(ctx, "orders", "m-9", []byte("p"), e.effect("m-9", []byte("second")))
			if err != nil {
				t.Error(err)
			}
			second <- dup
		}()
		select {
		case dup := <-second:
			t.Fatalf("second delivery finished (duplicate=%v) while the first was open", dup)
		case <-time.After(200 * time.Millisecond):
		}
		close(fail)
		if err := <-firstErr; err == nil || err.Error() != "downstream failed" {
			t.Fatalf("first delivery: %v", err)
		}
		if dup := <-second; dup {
			t.Fatal("second delivery reported a duplicate of a message that was never applied")
		}
		if n := e.count(t, `SELECT count(*) FROM effects WHERE body = 'second'`); n != 1 || e.count(t, `SELECT count(*) FROM effects`) != 1 {
			t.Fatal("want exactly the second delivery's effect")
		}
	})
}

// The same id with a different payload is an error, and nothing runs.
func TestChangedPayloadIsAnError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if _, err := e.in.Process(ctx, "orders", "m-1", []byte(`{"amount":10}`), e.effect("m-1", nil)); err != nil {
			t.Fatal(err)
		}
		ran := false
		dup, err := e.in.Process(ctx, "orders", "m-1", []byte(`{"amount":1000}`), func(*sql.Tx) error { ran = true; return nil })
		var me *inbox.MismatchError
		if !errors.Is(err, idem.ErrMismatch) || !errors.As(err, &me) || me.MessageID != "m-1" || ran || !dup {
			t.Fatalf("changed payload: duplicate=%v err=%v ran=%v", dup, err, ran)
		}
	})
}

// A Kafka-style consumer keeps its offset in the same transaction as the
// effect and the record: after a crash it resumes from the stored offset,
// and any message it sees again is a duplicate.
func TestOffsetInTheSameTransaction(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.exec(t, `INSERT INTO offsets (part, next) VALUES (0, 0)`)
		stream := []string{"a", "b", "c", "d"}
		consume := func(from int) {
			for off := from; off < len(stream); off++ {
				_, err := e.in.Process(ctx, "topic/0", fmt.Sprint(off), []byte(stream[off]), func(tx *sql.Tx) error {
					if err := e.effect(fmt.Sprint(off), []byte(stream[off]))(tx); err != nil {
						return err
					}
					_, err := tx.Exec(e.q(`UPDATE offsets SET next = ? WHERE part = 0`), off+1)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		consume(0)
		consume(1) // a rebalance that replays from an older offset
		if n := e.count(t, `SELECT count(*) FROM effects`); n != len(stream) {
			t.Fatalf("effects = %d, want %d", n, len(stream))
		}
		if n := e.count(t, `SELECT next FROM offsets WHERE part = 0`); n != len(stream) {
			t.Fatalf("stored offset %d, want %d", n, len(stream))
		}
	})
}

func TestRecordTxAndPruneAndBadInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tx, err := e.in.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if dup, err := e.in.RecordTx(ctx, tx, "hooks", "evt_1", []byte("p")); err != nil || dup {
			t.Fatalf("RecordTx: %v %v", dup, err)
		}
		if dup, err := e.in.RecordTx(ctx, tx, "hooks", "evt_1", []byte("p")); err != nil || !dup {
			t.Fatalf("RecordTx again in the same transaction: %v %v", dup, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if n, err := e.in.Prune(ctx, 5*time.Millisecond); err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if dup, err := e.in.Process(ctx, "hooks", "evt_1", []byte("p"), e.effect("evt_1", nil)); err != nil || dup {
			t.Fatalf("after prune the message is new again: %v %v", dup, err)
		}

		noop := func(*sql.Tx) error { return nil }
		for name, call := range map[string]func() error{
			"empty source":  func() error { _, err := e.in.Process(ctx, "", "x", nil, noop); return err },
			"empty id":      func() error { _, err := e.in.Process(ctx, "s", "", nil, noop); return err },
			"long id":       func() error { _, err := e.in.Process(ctx, "s", strings.Repeat("x", 256), nil, noop); return err },
			"newline in id": func() error { _, err := e.in.Process(ctx, "s", "a\nb", nil, noop); return err },
			"nil fn":        func() error { _, err := e.in.Process(ctx, "s", "x", nil, nil); return err },
			"nil tx":        func() error { _, err := e.in.RecordTx(ctx, nil, "s", "x", nil); return err },
			"prune 0":       func() error { _, err := e.in.Prune(ctx, 0); return err },
		} {
			if err := call(); !errors.Is(err, idem.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
	})
}
