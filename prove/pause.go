package prove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemdev/idem"
)

// pauseFactor is how many leases a holder stays paused.
const pauseFactor = 2.5

// runPausePastLease: holders claim every operation (heartbeating), report,
// and are SIGSTOPped. After 2.5 leases other workers reclaim and finish
// every operation; then the holders are continued and told to go on. Each
// writes its effect and completes in one transaction, and every one of
// those transactions must be refused by the fence, so that no effect
// commits twice.
func runPausePastLease(ctx context.Context, t *trial) error {
	held := 0
	var holders []*proc
	for _, j := range t.split(spec{Role: roleHold}, t.shuffled()) {
		p, err := t.start(ctx, j.s, "")
		if err != nil {
			return err
		}
		holders = append(holders, p)
		e, err := p.expect(ctx, evClaimed)
		if err != nil {
			return err
		}
		held += e.Count
	}
	for _, p := range holders {
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
	if err := sleep(ctx, time.Duration(pauseFactor*float64(t.lease))); err != nil {
		return err
	}
	if err := t.runAll(ctx, t.split(spec{Role: roleDo, RetryInFlight: true}, t.keys)); err != nil {
		return fmt.Errorf("finishing while the holders are paused: %w", err)
	}
	var errs []error
	for _, p := range holders {
		if err := p.resume(); err != nil {
			return err
		}
		p.send("go")
	}
	for _, p := range holders {
		errs = append(errs, p.wait(ctx, false))
	}
	if !t.r.cfg.NoGuard {
		// The finishers may add fenced attempts of their own: a loaded
		// machine can keep their heartbeats out for a whole lease, and
		// their keep-alive then gives the lease up (they retry). A holder's
		// write that was not fenced shows as a second effect.
		t.counts = func(r *Result) {
			if r.Fenced < held {
				t.fail("%d fenced writes, fewer than the %d of paused holders: want all of theirs", r.Fenced, held)
			}
		}
	}
	return errors.Join(errs...)
}

// runHold claims every key, reports claimed (Count: how many it holds)
// and waits for "go" on stdin, during which the parent pauses it. Then, whatever it may have missed, it writes each
// effect and completes the claim in one transaction, reporting a refused
// completion as fenced.
func (w *worker) runHold(ctx context.Context) error {
	claims := make([]*idem.Claim, len(w.s.Keys))
	held := 0
	// Heartbeats keep the first claims alive while the last are taken.
	// They stop before the pause: a process stopped inside a heartbeat
	// would hold SQLite's only write lock, and every other worker would
	// wait for it; what the ledger sees is the same either way (no
	// heartbeat comes, the lease ends).
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.heartbeat(ctx, &mu, claims, stop) })
	// A holder holds all its claims at once: each is its own line of
	// attempts (G) in the history.
	for i, k := range w.s.Keys {
		w.out.emit(wireEvent{Ev: evInvoke, G: i, Key: k})
		if w.s.NoGuard {
			continue
		}
		c, err := w.l.Claim(ctx, w.op(k))
		switch {
		case err != nil:
			w.out.emit(wireEvent{Ev: evUnknown, G: i, Key: k, Err: err.Error()})
		case !c.Outcome.Held():
			w.out.emit(wireEvent{Ev: evFail, G: i, Key: k, Kind: c.Outcome.String(), Err: "not held"})
		default:
			mu.Lock()
			claims[i] = c
			mu.Unlock()
			held++
		}
	}
	close(stop)
	wg.Wait()
	w.out.emit(wireEvent{Ev: evClaimed, Count: held})
	w.in.ReadString('\n')
	for i, k := range w.s.Keys {
		if claims[i] == nil && !w.s.NoGuard {
			continue
		}
		body := w.newBody(k)
		err := w.commitLocal(ctx, claims[i], k, body)
		switch {
		case err == nil:
			w.out.emit(wireEvent{Ev: evOK, G: i, Key: k, Body: body})
		case errors.Is(err, idem.ErrLeaseLost):
			w.out.emit(wireEvent{Ev: evFail, G: i, Key: k, Kind: failLeaseLost, Err: err.Error(), Token: claims[i].Token})
		default:
			w.out.emit(wireEvent{Ev: evUnknown, G: i, Key: k, Err: err.Error()})
		}
	}
	return nil
}

// heartbeat renews every claim a third of a lease apart until stop.
func (w *worker) heartbeat(ctx context.Context, mu *sync.Mutex, claims []*idem.Claim, stop chan struct{}) {
	tick := time.NewTicker(max(w.lease/3, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		mu.Lock()
		cs := slices.Clone(claims)
		mu.Unlock()
		for _, c := range cs {
			if c != nil {
				w.l.Heartbeat(ctx, c) // a lost lease shows at the commit
			}
		}
	}
}
