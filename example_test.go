package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver/sqlite"
	_ "modernc.org/sqlite"
)

// Do runs a function at most once per key; a retry gets the stored result.
// The function's write to the orders table and the done mark commit in one
// transaction.
func ExampleLedger_Do() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	// The application's own pool (modernc.org/sqlite, pure Go); idem keeps
	// one of its connections for its writes and leaves the pool open.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "idem.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := idem.New(ctx, sqlite.New(db, nil), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	op := idem.Op{Scope: "shop", Key: "order-42/charge", Fingerprint: "sha256:9f86d0"}
	charge := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		fmt.Println("charging order 42")
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS charges (order_id INTEGER, amount INTEGER)`); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES (42, 1999)`); err != nil {
			return nil, err
		}
		return []byte("charge ch_1 ok"), nil
	}

	for range 3 { // the first call runs; the retries replay
		res, err := l.Do(ctx, op, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", res.Body, res.Replayed)
	}

	// The same key with a different request is refused, never guessed.
	op.Fingerprint = "sha256:2c26b4"
	_, err = l.Do(ctx, op, charge)
	fmt.Println(errors.Is(err, idem.ErrMismatch))

	// Output:
	// charging order 42
	// charge ch_1 ok (replayed: false)
	// charge ch_1 ok (replayed: true)
	// charge ch_1 ok (replayed: true)
	// true
}

// Claim and Complete are the lower level: claim the key, do the work, and
// complete with the fencing token the claim carries.
func ExampleLedger_Claim() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	op := idem.Op{Scope: "acct-7", Key: "payout-2024-06", Fingerprint: "fp-1"}
	c, err := l.Claim(ctx, op)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Outcome, "token", c.Token)

	// A second caller while the first works: back off.
	c2, err := l.Claim(ctx, op)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c2.Outcome)

	// The same key in another scope is another operation.
	other, err := l.Claim(ctx, idem.Op{Scope: "acct-8", Key: op.Key, Fingerprint: "fp-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(other.Outcome, "token", other.Token)

	if err := l.Complete(ctx, c, idem.Result{Status: 201, Body: []byte(`{"payout":"po_1"}`)}); err != nil {
		log.Fatal(err) // idem.ErrLeaseLost if the claim was taken over
	}

	c3, err := l.Claim(ctx, op)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c3.Outcome, c3.Result.Status, string(c3.Result.Body))

	// Release gives a claim up without a result: the next claim starts
	// clean with the next token.
	if err := l.Release(ctx, other); err != nil {
		log.Fatal(err)
	}
	again, err := l.Claim(ctx, idem.Op{Scope: "acct-8", Key: op.Key, Fingerprint: "fp-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.Outcome, "token", again.Token)

	// Output:
	// acquired token 1
	// in_flight
	// acquired token 1
	// replay 201 {"payout":"po_1"}
	// acquired token 2
}
