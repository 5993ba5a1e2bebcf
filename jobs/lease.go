package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemdev/idem/driver"
)

// keepAlive heartbeats the job's lease every third of the lease until
// stopped. It cancels the job's context with ErrLeaseLost when a heartbeat
// is fenced out (another worker took the job), or when no heartbeat has
// succeeded for a whole lease (the database is unreachable, so the lease
// must be presumed gone).
func (ex *execution) keepAlive(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	lease := ex.c.cfg.Lease
	every := lease / 3
	hbCtx, hbCancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	// The lease was granted after the claim was sent: counting from then
	// never overestimates it.
	confirmed := ex.claimSent
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			callCtx, callCancel := context.WithTimeout(hbCtx, every)
			_, err := ex.c.drv.HeartbeatJob(callCtx, ex.fence, lease)
			callCancel()
			switch {
			case err == nil:
				confirmed = sent
			case errors.Is(err, driver.ErrFenced):
				ex.log(ctx, slog.LevelWarn, "lease lost at heartbeat; cancelling the job")
				cancel(ErrLeaseLost)
				return
			case hbCtx.Err() != nil:
				return
			default:
				ex.log(ctx, slog.LevelWarn, "heartbeat failed", slog.String("error", err.Error()))
				if time.Since(confirmed) >= lease {
					ex.log(ctx, slog.LevelWarn, "no heartbeat for a whole lease; cancelling the job")
					cancel(ErrLeaseLost)
					return
				}
			}
		}
	}()
	return func() {
		hbCancel()
		<-finished
	}
}
