package prove

import (
	"context"
	"fmt"
	"time"
)

func skipDBRestart(r *runner) string {
	switch {
	case r.db.driver != "postgres":
		return "PostgreSQL only: SQLite has no server to restart"
	case r.db.cluster == nil:
		return "needs a cluster the prover owns (--db postgres); it does not restart yours"
	}
	return ""
}

// runDBRestart runs the operations on Workers workers that retry every
// error with the same key, and stops the PostgreSQL server hard (pg_ctl
// stop -m immediate: no shutdown checkpoint, crash recovery on start) once
// a third of them are acknowledged, then starts it again. Attempts cut off
// by the restart are unknown; their retries find out (a replay if the
// commit made it, the claim back after its lease if not). Nothing
// acknowledged may be missing afterwards, nothing may have happened twice.
func runDBRestart(ctx context.Context, t *trial) error {
	// Paced so that the run lasts about a second whatever the number of
	// operations: the restart must land in the middle of it.
	pace := min(200*time.Millisecond, time.Second*time.Duration(t.r.cfg.Workers)/time.Duration(len(t.keys)))
	s := spec{Role: roleDo, RetryInFlight: true, RetryErrors: true, PaceMS: pace.Milliseconds()}
	done := make(chan error, 1)
	go func() { done <- t.runAll(ctx, t.split(s, t.shuffled())) }()

	var err error
	restarted := false
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-time.After(2 * time.Millisecond):
		}
		if _, settled, _ := t.h.stats(); !restarted && settled >= len(t.keys)/3 {
			restarted = true
			if rerr := t.r.db.cluster.Restart(ctx); rerr != nil {
				<-done
				return fmt.Errorf("restarting PostgreSQL: %w", rerr)
			}
		}
	}
	if !restarted {
		t.note("the operations were done before a third was acknowledged; the restart came after them (raise --ops)")
		if rerr := t.r.db.cluster.Restart(ctx); rerr != nil {
			return fmt.Errorf("restarting PostgreSQL: %w", rerr)
		}
	}
	if rerr := t.r.reopen(ctx); rerr != nil {
		return fmt.Errorf("reconnecting after the restart: %w", rerr)
	}
	return err
}
