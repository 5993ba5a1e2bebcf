package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

const racers = 64

// race releases n goroutines through one closed channel, each running fn,
// and returns when all are done.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// testClaimRace: 64 goroutines claim one key at once. Exactly one acquires
// it; the others see it in flight. After it completes, 64 more all get the
// stored result, byte for byte.
func testClaimRace(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	op := idem.Op{Scope: "tenant", Key: "race", Fingerprint: "fp"}

	claims := make([]*idem.Claim, racers)
	errs := make([]error, racers)
	race(racers, func(i int) { claims[i], errs[i] = l.Claim(f.ctx, op) })

	var winner *idem.Claim
	for i, c := range claims {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		switch c.Outcome {
		case idem.Acquired:
			if winner != nil {
				t.Fatalf("two claims acquired the key: tokens %d and %d", winner.Token, c.Token)
			}
			winner = c
		case idem.InFlight:
			if c.Record.State != idemtype.StateInProgress || c.Record.Attempt != 1 {
				t.Errorf("in-flight claim %d saw record %s attempt %d, want in_progress attempt 1", i, c.Record.State, c.Record.Attempt)
			}
		default:
			t.Fatalf("claim %d: outcome %v before completion, want acquired or in_flight", i, c.Outcome)
		}
	}
	if winner == nil {
		t.Fatal("no claim acquired the key")
	}
	if winner.Token != 1 {
		t.Errorf("winner token %d, want 1", winner.Token)
	}

	body := make([]byte, 4096)
	rng := newRand(t)
	for i := range body {
		body[i] = byte(rng.UintN(256)) // every byte value, NUL and invalid UTF-8 included
	}
	meta := []byte(`{"content-type":["application/octet-stream"]}`)
	if err := l.Complete(f.ctx, winner, idem.Result{Status: 201, Meta: meta, Body: body}); err != nil {
		t.Fatalf("complete: %v", err)
	}

	race(racers, func(i int) { claims[i], errs[i] = l.Claim(f.ctx, op) })
	for i, c := range claims {
		if errs[i] != nil {
			t.Fatalf("claim %d after completion: %v", i, errs[i])
		}
		if c.Outcome != idem.Replay {
			t.Fatalf("claim %d after completion: outcome %v, want replay", i, c.Outcome)
		}
		r := c.Result
		if !bytes.Equal(r.Body, body) || r.Status != 201 || !bytes.Equal(r.Meta, meta) || !r.Replayed {
			t.Fatalf("claim %d replayed status %d, meta %q, %d-byte body (equal: %v), replayed %v; want the stored result byte for byte",
				i, r.Status, r.Meta, len(r.Body), bytes.Equal(r.Body, body), r.Replayed)
		}
	}
}

// testDoRace: 64 goroutines call Do for one key at once while the winner
// finishes. The function runs once; every other caller gets ErrInFlight or
// the stored result, and the database holds one effect.
func testDoRace(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	createEffects(t, l)
	op := idem.Op{Scope: "tenant", Key: "do-race", Fingerprint: "fp"}
	want := []byte("charged\x00\xff once")

	var ran atomic.Int32
	fn := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		ran.Add(1)
		if err := insertEffect(ctx, l, tx, op.Scope, op.Key, 0); err != nil {
			return nil, err
		}
		return want, nil
	}
	results := make([]idem.Result, racers)
	errs := make([]error, racers)
	race(racers, func(i int) { results[i], errs[i] = l.Do(f.ctx, op, fn) })

	fresh, replays, inflight := 0, 0, 0
	for i := range racers {
		switch err := errs[i]; {
		case err == nil && !results[i].Replayed:
			fresh++
		case err == nil:
			replays++
		case errors.Is(err, idem.ErrInFlight):
			inflight++
			continue
		default:
			t.Fatalf("Do %d: %v", i, err)
		}
		if !bytes.Equal(results[i].Body, want) {
			t.Fatalf("Do %d returned %q, want %q", i, results[i].Body, want)
		}
	}
	t.Logf("%d ran, %d replays, %d in flight", fresh, replays, inflight)
	if fresh != 1 || ran.Load() != 1 {
		t.Fatalf("%d calls returned a fresh result and the function ran %d times; want 1 and 1", fresh, ran.Load())
	}
	if got := effects(t, l, op.Scope); got[op.Key] != 1 || len(got) != 1 {
		t.Fatalf("effects %v, want exactly one for %q", got, op.Key)
	}
	res, err := l.Do(f.ctx, op, fn)
	if err != nil || !res.Replayed || !bytes.Equal(res.Body, want) || ran.Load() != 1 {
		t.Fatalf("Do after the race: %q replayed=%v err=%v ran=%d; want the stored result without running", res.Body, res.Replayed, err, ran.Load())
	}
}

// testProcessRace: several OS processes, each with many goroutines, race
// over the same keys. Exactly one acquisition per key across all processes,
// and exactly one effect row per key in the database.
func testProcessRace(t *testing.T, s *suite) {
	const (
		procs      = 4
		goroutines = 16
		nkeys      = 50
		scope      = "procs"
	)
	f := s.setup(t)
	l := f.open(nil)
	createEffects(t, l)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}

	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, "race", childArgs{Target: f.target.Name, DB: f.db, Scope: scope, Keys: keys, Goroutines: goroutines})
	}
	for _, c := range children {
		c.next(t, "ready")
	}
	for _, c := range children {
		c.stdin.Close() // go
	}

	acquired := map[string][]string{} // key -> "pid/token"
	counts := map[string]int{}
	byPID := map[int]int{}
	for _, c := range children {
		for _, e := range c.mustExitZero(t) {
			switch e.Event {
			case "acquired":
				acquired[e.Key] = append(acquired[e.Key], fmt.Sprintf("pid %d token %d", e.PID, e.Token))
				byPID[e.PID]++
				if e.Token != 1 {
					t.Errorf("key %s acquired with token %d, want 1", e.Key, e.Token)
				}
			case "summary":
				for k, n := range e.Counts {
					counts[k] += n
				}
			default:
				t.Fatalf("unexpected event %+v", e)
			}
		}
	}
	t.Logf("outcomes %v; acquisitions by process %v", counts, byPID)
	for _, k := range keys {
		if n := len(acquired[k]); n != 1 {
			t.Errorf("key %s acquired %d times (%v), want exactly once", k, n, acquired[k])
		}
	}
	total := 0
	for o, n := range counts {
		total += n
		if o != idem.Acquired.String() && o != idem.InFlight.String() && o != idem.Replay.String() {
			t.Errorf("%d claims ended %s; want only acquired, in_flight or replay", n, o)
		}
	}
	if total != procs*goroutines*nkeys || counts[idem.Acquired.String()] != nkeys {
		t.Errorf("%d claims with %d acquired, want %d with %d", total, counts[idem.Acquired.String()], procs*goroutines*nkeys, nkeys)
	}

	eff := effects(t, l, scope)
	for _, k := range keys {
		if eff[k] != 1 {
			t.Errorf("key %s has %d effect rows, want exactly 1", k, eff[k])
		}
	}
	if len(eff) != nkeys {
		t.Errorf("effects for %d keys, want %d: %v", len(eff), nkeys, slices.Sorted(maps.Keys(eff)))
	}
	for _, k := range keys {
		r := mustGet(t, f.ctx, l, scope, k)
		if r.State != idemtype.StateSucceeded || r.Attempt != 1 || string(r.Body) != "done "+k {
			t.Errorf("record %s: state %s attempt %d body %q; want succeeded, 1, %q", k, r.State, r.Attempt, r.Body, "done "+k)
		}
	}
}
