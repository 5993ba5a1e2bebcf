package jobs

import (
	"context"
	"errors"
	"log/slog"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/keepalive"
)

// keepAlive heartbeats the job's lease while it runs (see
// internal/keepalive). It cancels the job's context with ErrLeaseLost when
// a heartbeat is fenced out (another worker took the job), or when no
// heartbeat has succeeded for a whole lease (the database is unreachable,
// so the lease must be presumed gone).
func (ex *execution) keepAlive(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	lease := ex.c.cfg.Lease
	return keepalive.Start(ctx, keepalive.Config{
		Lease: lease,
		// The lease was granted after the claim was sent: counting from then
		// never overestimates it.
		Granted: ex.claimSent,
		Heartbeat: func(ctx context.Context) error {
			_, err := ex.c.drv.HeartbeatJob(ctx, ex.fence, lease)
			return err
		},
		Fenced: func(err error) bool { return errors.Is(err, driver.ErrFenced) },
		Lost: func(cause error) {
			ex.log(ctx, slog.LevelWarn, "lease lost; cancelling the job", slog.String("why", cause.Error()))
			cancel(ErrLeaseLost)
		},
		Failed: func(err error) {
			ex.log(ctx, slog.LevelWarn, "heartbeat failed", slog.String("error", err.Error()))
		},
	})
}
