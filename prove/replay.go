package prove

import (
	"context"
	"fmt"
	"time"
)

// runReplayBatch runs a batch once with a short retention, replays the
// whole batch inside retention (every operation must replay, no effect),
// waits until retention has ended by the database clock, and replays it
// again: every operation must now be reported expired (the documented
// policy: a late replay is detected and counted, never run again). On a
// database the prover owns it then prunes, turning the records into
// tombstones, and replays a third time, with the same expectation.
func runReplayBatch(ctx context.Context, t *trial) error {
	// Long enough to replay the batch inside it on a slow machine; short
	// enough to wait for.
	retention := max(time.Second, 2*t.lease) + time.Duration(len(t.keys))*10*time.Millisecond
	s := spec{Role: roleDo, RetentionMS: retention.Milliseconds(), RetryInFlight: true}

	if err := t.runAll(ctx, t.split(s, t.keys)); err != nil {
		return fmt.Errorf("the batch: %w", err)
	}
	batchDone := time.Now()

	mark := len(t.h.snapshot())
	if err := t.runAll(ctx, t.split(s, t.shuffled())); err != nil {
		return fmt.Errorf("the replay inside retention: %w", err)
	}
	inside := tally(t.h.snapshot()[mark:])
	if late := inside.expired; late > 0 {
		t.note("%d replays inside retention came after it had ended (a machine slower than the %v retention allows); they were detected as expired", late, retention)
	}

	if err := sleep(ctx, time.Until(batchDone.Add(retention))); err != nil {
		return err
	}
	if !t.r.cfg.NoGuard {
		if err := t.waitExpired(ctx); err != nil {
			return err
		}
	}
	replays := 1
	mark = len(t.h.snapshot())
	if err := t.runAll(ctx, t.split(s, t.shuffled())); err != nil {
		return fmt.Errorf("the replay after retention: %w", err)
	}
	if t.r.db.owned && !t.r.cfg.NoGuard {
		if _, err := t.r.ledger.Prune(ctx, nil); err != nil {
			return err
		}
		replays++
		if err := t.runAll(ctx, t.split(s, t.shuffled())); err != nil {
			return fmt.Errorf("the replay after pruning: %w", err)
		}
	}
	after := tally(t.h.snapshot()[mark:])
	if !t.r.cfg.NoGuard && after.expired != replays*len(t.keys) {
		t.fail("%d of %d replays after retention were detected as expired (%d replayed the stored result, %d ran)",
			after.expired, replays*len(t.keys), after.replays, after.ran)
	}
	return nil
}

// waitExpired waits until every record's retention has ended by the
// database clock (which, on a remote PostgreSQL, is not ours).
func (t *trial) waitExpired(ctx context.Context) error {
	for _, k := range t.keys {
		for {
			rec, err := t.r.ledger.Get(ctx, t.scope, k)
			if err != nil {
				return fmt.Errorf("waiting for %s to expire: %w", k, err)
			}
			left := rec.ExpiresAt.Sub(rec.Now)
			if rec.ExpiresAt.IsZero() || left < 0 {
				break
			}
			if err := sleep(ctx, left+10*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// phaseTally counts what the attempts of one phase got.
type phaseTally struct{ replays, ran, expired int }

func tally(events []Event) phaseTally {
	var p phaseTally
	for _, e := range events {
		switch {
		case e.Type == OK && e.Replay:
			p.replays++
		case e.Type == OK:
			p.ran++
		case e.Type == Fail && e.Kind == failExpired:
			p.expired++
		}
	}
	return p
}
