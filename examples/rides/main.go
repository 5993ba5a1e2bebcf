// Command rides books a ride in three steps under one idempotency key: a
// ride row (a transaction step: exactly once), a charge at a payment
// provider (an external step: the step's key is forwarded, so the provider
// charges once; a lookup by key decides a charge whose answer was lost),
// and a queued receipt (a transaction step). Killed at any point and run
// again, it resumes from the last checkpoint: one ride, one charge, one
// receipt.
//
//	go run ./examples/rides ride-42            # with a built-in fake provider
//	go run ./examples/rides --provider URL --db rides.db ride-42
//	go run ./examples/rides --complete         # finish abandoned bookings, no client needed
//
// The provider takes POST /charges with an Idempotency-Key header and a
// JSON body {"amount": cents}, answers {"id": ...}, and answers
// GET /charges?key=KEY with the charge, or 404 if there is none.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/sqlite"
	_ "modernc.org/sqlite"
)

// Booking is a run's input, stored with it so a completer can resume it.
type Booking struct {
	RideID string `json:"ride_id"`
	Amount int    `json:"amount"`
}

// Charge is the provider's answer.
type Charge struct {
	ID string `json:"id"`
}

func main() {
	dbPath := flag.String("db", "rides.db", "SQLite `file` holding the ledger, rides and receipts")
	provider := flag.String("provider", "", "payment provider base `URL` (default: a built-in fake)")
	lease := flag.Duration("lease", 30*time.Second, "how long a booking is trusted without a heartbeat; a killed booking is resumed after it")
	complete := flag.Bool("complete", false, "finish every abandoned booking (lease ended) instead of booking one")
	flag.Parse()
	if *complete != (flag.NArg() == 0) {
		fmt.Fprintln(os.Stderr, "usage: rides [--db FILE] [--provider URL] [--lease D] RIDE-ID | rides --complete")
		os.Exit(2)
	}
	if *provider == "" {
		srv := httptest.NewServer(NewFakeProvider())
		defer srv.Close()
		*provider = srv.URL
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(context.Background(), *dbPath, *provider, *lease, *complete, flag.Arg(0), log); err != nil {
		log.Error("rides failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dbPath, provider string, lease time.Duration, complete bool, rideID string, log *slog.Logger) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := idem.New(ctx, sqlite.New(db, nil), &idem.Options{Logger: log, Lease: lease})
	if err != nil {
		return err
	}
	defer l.Close()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS rides (id TEXT NOT NULL, amount INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS receipts (ride_id TEXT NOT NULL, charge_id TEXT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	psp := &client{base: provider, http: &http.Client{Timeout: 10 * time.Second}}
	runs := idem.NewRuns()
	book := idem.AddRun(runs, "book-ride/v1", func(r *idem.Run, b Booking) (idem.Result, error) {
		return bookRide(r, psp, b)
	})
	if complete {
		n, err := idem.NewCompleter(l, runs, nil).CompleteOnce(ctx)
		fmt.Printf("completed %d abandoned bookings\n", n)
		return err
	}
	op := idem.Op{Key: "book/" + rideID, Fingerprint: rideID}
	for {
		res, err := book.Run(ctx, l, op, Booking{RideID: rideID, Amount: 1250})
		if errors.Is(err, idem.ErrInFlight) {
			// An earlier attempt (killed, say) holds the booking until its
			// lease ends; then this retry resumes it.
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		fmt.Printf("%s (replayed: %v)\n", res.Body, res.Replayed)
		return nil
	}
}

// bookRide is the run: three steps, each done once whatever crashes.
func bookRide(r *idem.Run, psp *client, b Booking) (idem.Result, error) {
	_, err := idem.TxStep(r, "create-ride", func(ctx context.Context, tx *sql.Tx) (string, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO rides (id, amount) VALUES (?, ?)`, b.RideID, b.Amount)
		return b.RideID, err
	})
	if err != nil {
		return idem.Result{}, err
	}
	ch, err := idem.CallStep(r, "charge", func(ctx context.Context, key string) (Charge, error) {
		return psp.charge(ctx, key, b.Amount)
	}, idem.StepLookup(psp.find))
	if err != nil {
		return idem.Result{}, err
	}
	_, err = idem.TxStep(r, "queue-receipt", func(ctx context.Context, tx *sql.Tx) (bool, error) {
		// The receipt's email would go through an outbox row written here.
		_, err := tx.ExecContext(ctx, `INSERT INTO receipts (ride_id, charge_id) VALUES (?, ?)`, b.RideID, ch.ID)
		return true, err
	})
	if err != nil {
		return idem.Result{}, err
	}
	return idem.Result{Status: 201, Body: []byte(fmt.Sprintf("booked %s, charged %s", b.RideID, ch.ID))}, nil
}

// client talks to the payment provider.
type client struct {
	base string
	http *http.Client
}

func (c *client) charge(ctx context.Context, key string, amount int) (Charge, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/charges", strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	if err != nil {
		return Charge{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// find is the charge step's lookup: done with the charge, or not done.
func (c *client) find(ctx context.Context, key string) (Charge, idem.Verdict, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/charges?key="+url.QueryEscape(key), nil)
	if err != nil {
		return Charge{}, idem.VerdictUnknown, err
	}
	ch, err := c.do(req)
	switch {
	case errors.Is(err, errNotFound):
		return Charge{}, idem.VerdictNotDone, nil
	case err != nil:
		return Charge{}, idem.VerdictUnknown, err
	}
	return ch, idem.VerdictDone, nil
}

var errNotFound = errors.New("not found")

func (c *client) do(req *http.Request) (Charge, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return Charge{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return Charge{}, errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return Charge{}, fmt.Errorf("provider: %s", resp.Status)
	}
	var ch Charge
	err = json.NewDecoder(resp.Body).Decode(&ch)
	return ch, err
}

// FakeProvider is a payment provider that honours Idempotency-Key: one
// charge per key, a repeat answered from memory, and a lookup by key.
type FakeProvider struct {
	mu      sync.Mutex
	charges map[string]Charge
	calls   map[string]int // POST /charges per key
	after   func()         // SetAfterCharge
}

// SetAfterCharge sets a function run after each new charge is made and
// before its answer is sent (nil: none).
func (p *FakeProvider) SetAfterCharge(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after = fn
}

// NewFakeProvider returns an empty provider.
func NewFakeProvider() *FakeProvider {
	return &FakeProvider{charges: map[string]Charge{}, calls: map[string]int{}}
}

func (p *FakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Method {
	case "POST":
		key := r.Header.Get("Idempotency-Key")
		p.calls[key]++
		ch, ok := p.charges[key]
		if !ok {
			ch = Charge{ID: fmt.Sprintf("ch_%d", len(p.charges)+1)}
			p.charges[key] = ch
			if p.after != nil {
				p.after()
			}
		}
		json.NewEncoder(w).Encode(ch)
	case "GET":
		ch, ok := p.charges[r.URL.Query().Get("key")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(ch)
	}
}

// Charges returns how many distinct charges the provider holds.
func (p *FakeProvider) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges)
}

// Calls returns how many times key was charged (POST /charges), repeats
// included.
func (p *FakeProvider) Calls(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}
