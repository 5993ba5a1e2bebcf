package prove

import (
	"context"
	"errors"
)

// deliveriesPerWorker is how many goroutines of each worker take every
// operation: with Workers processes, each operation is delivered
// Workers×deliveriesPerWorker times at once.
const deliveriesPerWorker = 2

// runDuplicateDelivery hands every operation to every goroutine of every
// worker. The workers start together (each reports ready, then all are
// told to go at once) and take the operations in the same order, so the
// deliveries of one operation collide. The losers see it in flight and
// retry until they get the replay.
func runDuplicateDelivery(ctx context.Context, t *trial) error {
	s := spec{Role: roleDo, Keys: t.shuffled(), Goroutines: deliveriesPerWorker, WaitGo: true, RetryInFlight: true}
	var procs []*proc
	for range t.r.cfg.Workers {
		p, err := t.start(ctx, s, "")
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if _, err := p.expect(ctx, evReady); err != nil {
			return err
		}
	}
	for _, p := range procs {
		p.send("go")
	}
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.wait(ctx, false))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	k := t.r.cfg.Workers * deliveriesPerWorker
	t.counts = func(r *Result) {
		if r.Attempts < k*len(t.keys) {
			t.fail("only %d attempts for %d operations delivered %d times each", r.Attempts, len(t.keys), k)
		}
	}
	return nil
}
