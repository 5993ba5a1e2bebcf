package prove

import (
	"context"
	"fmt"
	"time"

	"github.com/idemdev/idem/internal/crashpoint"
)

// The crash scenarios kill workers with SIGKILL at a named crash point and
// then let fresh workers finish, after the dead holders' leases.
//
// In the attack, the operations (in a random order) are cut into groups
// of one to three; each group goes to its own worker, armed to die at a
// random one of the group's hits of the crash point, so every group loses
// one operation mid-flight (and leaves the ones after it untouched). In
// the recovery, after the lease, Workers workers take every operation not
// yet acknowledged and retry until each settles.

func runCrashBeforeCall(ctx context.Context, t *trial) error {
	return t.attackAndRecover(ctx, spec{Role: roleDo}, crashpoint.AfterClaim)
}

func runCrashBeforeCommit(ctx context.Context, t *trial) error {
	return t.attackAndRecover(ctx, spec{Role: roleDo}, crashpoint.BeforeCommit)
}

// runCrashAfterCommit: the killed operations committed; their retries must
// be replays of what the dead worker stored.
func runCrashAfterCommit(ctx context.Context, t *trial) error {
	if err := t.attackAndRecover(ctx, spec{Role: roleDo}, crashpoint.AfterCommit); err != nil {
		return err
	}
	redone := 0
	for _, e := range lastOKs(t.h.snapshot(), killedOps(t.h.snapshot())) {
		if !e.Replay {
			redone++
		}
	}
	if redone > 0 && !t.r.cfg.NoGuard {
		t.fail("%d operations killed after their commit ran again instead of replaying", redone)
	}
	return nil
}

// runCrashAfterCall kills workers between the provider's effect and its
// record in the ledger. What recovers depends on the provider: one that
// honours the forwarded key is simply called again (Redo); one that can be
// asked is asked (Reconcile); one that can do neither leaves the outcome
// unknown, and idem must park the claim rather than call again.
func runCrashAfterCall(ctx context.Context, t *trial) error {
	mode := providerMode(t.variant)
	p, err := startProvider(mode)
	if err != nil {
		return err
	}
	defer p.close()
	t.effects = func(context.Context) (map[string][]string, error) { return p.effectsIn(t.scope), nil }
	s := spec{Role: roleCall, Provider: p.url}
	switch mode {
	case keyed:
		s.Stale = "redo"
	case lookup:
		s.Stale = "reconcile"
	case blind:
		s.Stale = "park"
		t.allowParked = true
	default:
		return fmt.Errorf("unknown provider %q", mode)
	}
	return t.attackAndRecover(ctx, s, crashpoint.AfterCall)
}

// attackAndRecover is the crash scenarios' two phases.
func (t *trial) attackAndRecover(ctx context.Context, s spec, point string) error {
	return t.attackAndRecoverAt(ctx, s, func(n int) string { return fmt.Sprintf("%s:%d", point, 1+t.intN(n)) })
}

// attackAndRecoverAt is attackAndRecover with each group's crash points
// chosen by crash, given the group's size.
func (t *trial) attackAndRecoverAt(ctx context.Context, s spec, crash func(n int) string) error {
	keys := t.shuffled()
	var jobs []job
	for i := 0; i < len(keys); {
		n := min(1+t.intN(3), len(keys)-i)
		g := s
		g.Keys = keys[i : i+n]
		jobs = append(jobs, job{s: g, crash: crash(n)})
		i += n
	}
	if err := t.runAll(ctx, jobs); err != nil {
		return fmt.Errorf("attack: %w", err)
	}
	// Every dead holder's lease has ended once a lease has passed since the
	// last of them died (heartbeats stopped with them).
	if err := sleep(ctx, t.lease+t.lease/4+50*time.Millisecond); err != nil {
		return err
	}
	s.RetryInFlight, s.RetryErrors = true, true
	if err := t.runAll(ctx, t.split(s, t.unsettled())); err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	return nil
}

// killedOps returns the operations that had an attempt end Unknown.
func killedOps(events []Event) map[string]bool {
	out := map[string]bool{}
	for _, e := range events {
		if e.Type == Unknown {
			out[e.Op] = true
		}
	}
	return out
}

// lastOKs returns the last OK of each operation in ops.
func lastOKs(events []Event, ops map[string]bool) map[string]Event {
	out := map[string]Event{}
	for _, e := range events {
		if e.Type == OK && ops[e.Op] {
			out[e.Op] = e
		}
	}
	return out
}
