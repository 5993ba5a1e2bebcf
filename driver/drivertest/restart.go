package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// RunRestart is the database-restart fault, for drivers with a server:
// workers run Do, whose Func writes an effect row, over many keys while
// restart stops the server hard (no shutdown checkpoint) and starts it
// again, twice. A worker retries a key with the same op until Do succeeds.
// Afterwards every acknowledged operation has exactly one effect, none has
// two, and every replay returned its own key's result.
//
// restart disturbs every connection to the server: do not run other tests
// against it at the same time.
func RunRestart(t *testing.T, tg Target, db string, restart func(context.Context) error) {
	const (
		workers  = 8
		nkeys    = 320
		restarts = 2
		scope    = "restart"
	)
	ctx := t.Context()
	l, err := tg.openLedger(ctx, db, &idem.Options{Lease: time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	createEffects(t, l)

	keys := make(chan string, nkeys)
	for i := range nkeys {
		keys <- fmt.Sprintf("op-%03d", i)
	}
	close(keys)

	var (
		acked    atomic.Int32
		failures atomic.Int32 // Do errors, each retried
		ackMu    sync.Mutex
		acks     = map[string]idem.Result{}
		wg       sync.WaitGroup
		ackedN   = make(chan struct{}, nkeys) // one token per ack, for the restarter
		stop     = make(chan struct{})
		firstErr = map[string]int{}
	)
	for range workers {
		wg.Go(func() {
			for key := range keys {
				op := idem.Op{Scope: scope, Key: key, Fingerprint: "fp-" + key}
				want := "done " + key
				for {
					select {
					case <-stop:
						return
					default:
					}
					res, err := l.Do(ctx, op, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
						if err := insertEffect(ctx, l, tx, scope, key, 0); err != nil {
							return nil, err
						}
						return []byte(want), nil
					})
					if err == nil {
						if string(res.Body) != want {
							t.Errorf("key %s: Do returned %q, want %q", key, res.Body, want)
						}
						ackMu.Lock()
						acks[key] = res
						ackMu.Unlock()
						acked.Add(1)
						ackedN <- struct{}{}
						break
					}
					failures.Add(1)
					ackMu.Lock()
					kind := "other"
					switch {
					case errors.Is(err, idem.ErrInFlight):
						kind = "in flight"
					case errors.Is(err, idem.ErrLeaseLost):
						kind = "lease lost"
					}
					firstErr[kind]++
					ackMu.Unlock()
					time.Sleep(20 * time.Millisecond) // back off; the server may be down
				}
			}
		})
	}

	// Restart after a third and after two thirds of the operations.
	restartErr := make(chan error, 1)
	go func() {
		defer close(restartErr)
		for i := range restarts {
			for range nkeys / (restarts + 1) {
				select {
				case <-ackedN:
				case <-ctx.Done():
					return
				}
			}
			t.Logf("restart %d after %d acknowledged operations", i+1, acked.Load())
			if err := restart(context.WithoutCancel(ctx)); err != nil {
				restartErr <- err
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		close(stop)
		<-done
		t.Fatalf("only %d of %d operations acknowledged after 3 minutes", acked.Load(), nkeys)
	}
	if err := <-restartErr; err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("%d operations acknowledged; %d failed attempts retried (%v)", acked.Load(), failures.Load(), firstErr)

	eff := effects(t, l, scope)
	if len(acks) != nkeys {
		t.Fatalf("%d operations acknowledged, want %d", len(acks), nkeys)
	}
	for key := range acks {
		if eff[key] != 1 {
			t.Errorf("acknowledged operation %s has %d effects, want exactly 1", key, eff[key])
		}
	}
	for key, n := range eff {
		if _, ok := acks[key]; !ok || n != 1 {
			t.Errorf("key %s: %d effects (acknowledged: %v)", key, n, ok)
		}
	}
	recs, err := l.List(ctx, idemtype.ListFilter{Scope: scope, Limit: nkeys + 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != idemtype.StateSucceeded || string(r.Body) != "done "+r.Key {
			t.Errorf("record %s: %s %q, want succeeded with its own result", r.Key, r.State, r.Body)
		}
	}
}
