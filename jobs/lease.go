package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// The execution is its own keepalive.Holder: it heartbeats the job's lease
// while it runs (see internal/keepalive), from a keepalive.Loop kept in the
// execution, so that a job that ends before its first heartbeat is due
// (most) costs one timer and no closures. The loop cancels the job's
// context with ErrLeaseLost when a heartbeat is fenced out (another worker
// took the job), or when no heartbeat has succeeded for a whole lease (the
// database is unreachable, so the lease must be presumed gone); with
// ErrCancelled when the fenced heartbeat found the job cancelled.

// Heartbeat extends the job's lease (keepalive.Holder).
func (ex *execution) Heartbeat(ctx context.Context) error {
	_, err := ex.c.drv.HeartbeatJob(ctx, ex.fence, ex.c.cfg.Lease)
	if errors.Is(err, driver.ErrFenced) && ex.cancelled(ctx) {
		return fmt.Errorf("%w: %w", ErrCancelled, err)
	}
	return err
}

// Fenced reports whether a heartbeat's error means another worker took the
// job, or it was cancelled (keepalive.Holder).
func (ex *execution) Fenced(err error) bool { return errors.Is(err, driver.ErrFenced) }

// Lost cancels the job's context: the lease is lost (keepalive.Holder).
func (ex *execution) Lost(cause error) {
	if errors.Is(cause, ErrCancelled) {
		ex.log(ex.ctx, slog.LevelInfo, "job cancelled; cancelling its context")
		ex.cancel(ErrCancelled)
		return
	}
	ex.log(ex.ctx, slog.LevelWarn, "lease lost; cancelling the job", slog.String("why", cause.Error()))
	ex.cancel(ErrLeaseLost)
}

// Failed logs a heartbeat that failed without ending the lease
// (keepalive.Holder).
func (ex *execution) Failed(err error) {
	ex.log(ex.ctx, slog.LevelWarn, "heartbeat failed", slog.String("error", err.Error()))
}

// cancelled reports whether this claim ended because Cancel cancelled the
// job: asked after a fenced write, to tell a cancel from a takeover.
func (ex *execution) cancelled(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, finishTimeout)
	defer cancel()
	r, err := ex.c.drv.GetJob(ctx, ex.rec.ID)
	return err == nil && r.State == idemtype.JobCancelled && r.Attempt == ex.fence.Attempt && r.LeaseID == ex.fence.LeaseID
}
