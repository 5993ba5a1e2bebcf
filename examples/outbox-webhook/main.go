// Command outbox-webhook commits an order and its webhook in one
// transaction, relays it to a receiver that honours Idempotency-Key, and
// fans one notification out to 1,200 devices in chunks of 500, one of
// which fails once and is the only one sent again. It runs on a temporary
// SQLite file and a local HTTP server, and exits by itself.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/outbox"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()

	// The receiver: applies each Idempotency-Key once; chunk 2 of the
	// fan-out fails the first time.
	var mu sync.Mutex
	calls := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		calls[key]++
		n := calls[key]
		mu.Unlock()
		if key == "push-7/2" && n == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `{"received":true}`)
	}))
	defer rcv.Close()

	dir, err := os.MkdirTemp("", "idem-outbox-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		return err
	}
	defer l.Close()
	ob, err := outbox.New(l, &outbox.Config{Backoff: func(int) time.Duration { return 100 * time.Millisecond }})
	if err != nil {
		return err
	}
	if _, err := ob.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		return err
	}

	// The business change and its messages commit together, or not at all.
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('order-7')`); err != nil {
		return err
	}
	hook, err := ob.Add(ctx, tx, outbox.Message{ID: "order-7-paid", URL: rcv.URL, Body: []byte(`{"order":"order-7","event":"paid"}`)})
	if err != nil {
		return err
	}
	devices := make([]string, 1200)
	for i := range devices {
		devices[i] = fmt.Sprintf("device-%04d", i)
	}
	push, err := ob.Add(ctx, tx, outbox.Message{ID: "push-7", URL: rcv.URL, Body: []byte(`{"title":"Order paid"}`), Recipients: devices, ChunkSize: 500})
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}

	if err := ob.Start(ctx); err != nil {
		return err
	}
	for _, id := range []string{hook, push} {
		if err := waitDelivered(ctx, ob, id); err != nil {
			return err
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ob.Stop(stopCtx); err != nil {
		return err
	}
	for _, id := range []string{hook, push} {
		st, err := ob.Status(ctx, id)
		if err != nil {
			return err
		}
		for _, d := range st {
			fmt.Printf("%-14s %s after %d attempt(s), receiver answered %d\n", d.Key, d.State, d.Attempts, d.Outcome.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	keys := make([]string, 0, len(calls))
	for k := range calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("receiver saw %-14s %d time(s)\n", k, calls[k])
	}
	return nil
}

func waitDelivered(ctx context.Context, ob *outbox.Outbox, id string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, err := ob.Status(ctx, id)
		if err != nil {
			return err
		}
		done := len(st) > 0
		for _, d := range st {
			done = done && d.State == idemtype.JobCompleted
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("message %s not delivered in time", id)
}
