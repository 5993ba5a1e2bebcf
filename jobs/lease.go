package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/keepalive"
)

// keepAlive heartbeats the job's lease while it runs (see
// internal/keepalive). It cancels the job's context with ErrLeaseLost when
// a heartbeat is fenced out (another worker took the job), or when no
// heartbeat has succeeded for a whole lease (the database is unreachable,
// so the lease must be presumed gone); with ErrCancelled when the fenced
// heartbeat found the job cancelled.
func (ex *execution) keepAlive(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	lease := ex.c.cfg.Lease
	return keepalive.Start(ctx, keepalive.Config{
		Lease: lease,
		// The lease was granted after the claim was sent: counting from then
		// never overestimates it.
		Granted: ex.claimSent,
		Heartbeat: func(ctx context.Context) error {
			_, err := ex.c.drv.HeartbeatJob(ctx, ex.fence, lease)
			if errors.Is(err, driver.ErrFenced) && ex.cancelled(ctx) {
				return fmt.Errorf("%w: %w", ErrCancelled, err)
			}
			return err
		},
		Fenced: func(err error) bool { return errors.Is(err, driver.ErrFenced) },
		Lost: func(cause error) {
			if errors.Is(cause, ErrCancelled) {
				ex.log(ctx, slog.LevelInfo, "job cancelled; cancelling its context")
				cancel(ErrCancelled)
				return
			}
			ex.log(ctx, slog.LevelWarn, "lease lost; cancelling the job", slog.String("why", cause.Error()))
			cancel(ErrLeaseLost)
		},
		Failed: func(err error) {
			ex.log(ctx, slog.LevelWarn, "heartbeat failed", slog.String("error", err.Error()))
		},
	})
}

// cancelled reports whether this claim ended because Cancel cancelled the
// job: asked after a fenced write, to tell a cancel from a takeover.
func (ex *execution) cancelled(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, finishTimeout)
	defer cancel()
	r, err := ex.c.drv.GetJob(ctx, ex.rec.ID)
	return err == nil && r.State == idemtype.JobCancelled && r.Attempt == ex.fence.Attempt && r.LeaseID == ex.fence.LeaseID
}
