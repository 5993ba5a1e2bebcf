package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/keepalive"
)

// Job is a claimed job with its decoded arguments, as a Worker sees it.
type Job[T Args] struct {
	*idemtype.JobRow
	Args T

	ex *execution
}

// DB is a database/sql handle on the job's database, to begin the
// transaction passed to CompleteTx. On SQLite, keep that transaction
// short: it holds SQLite's write lock, which the job's heartbeats wait for.
func (j *Job[T]) DB() *sql.DB { return j.ex.c.drv.DB() }

// SetResult records b as the job's result, stored when it completes
// (by CompleteTx or by Work returning nil).
func (j *Job[T]) SetResult(b []byte) {
	j.ex.mu.Lock()
	j.ex.result = b
	j.ex.mu.Unlock()
}

// CompleteTx marks the job completed inside tx, so that the handler's local
// effect and the completion commit together or not at all. It checks the
// job's fencing token inside tx: if this worker's lease was lost (it paused
// or was slow, and another worker re-claimed the job) it writes nothing and
// returns ErrLeaseLost, and the handler must roll tx back. If the job was
// cancelled (Client.Cancel) the error matches both ErrCancelled and
// ErrLeaseLost. On PostgreSQL the
// job's row stays locked until tx ends, so nobody can take the job between
// this call and the commit.
//
// After CompleteTx the handler commits tx and returns nil. If tx rolls back
// instead, the job is retried as if Work had failed.
func (j *Job[T]) CompleteTx(ctx context.Context, tx idem.Tx) error {
	ex := j.ex
	q, err := ex.c.executor(tx)
	if err != nil {
		return err
	}
	err = ex.c.drv.FinishJob(ctx, q, driver.FinishJobParams{JobFence: ex.fence, State: idemtype.JobCompleted, Result: ex.resultBytes()})
	if errors.Is(err, driver.ErrFenced) && ex.cancelled(ctx) {
		ex.log(ctx, slog.LevelInfo, "completion refused: the job was cancelled")
		return fmt.Errorf("jobs: complete job %d attempt %d: %w (%w)", ex.rec.ID, ex.fence.Attempt, ErrCancelled, ErrLeaseLost)
	}
	if errors.Is(err, driver.ErrFenced) {
		ex.log(ctx, slog.LevelWarn, "lease lost at CompleteTx; the job belongs to another worker now")
		return fmt.Errorf("jobs: complete job %d attempt %d: %w", ex.rec.ID, ex.fence.Attempt, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("jobs: complete job %d: %w", ex.rec.ID, err)
	}
	ex.completedTx.Store(true)
	crashpoint.Hit(crashpoint.JobBeforeCommit)
	return nil
}

// execution is one claim of one job, from claim to finish.
type execution struct {
	c     *Client
	p     *producer
	rec   *idemtype.JobRow // &row
	row   idemtype.JobRow
	fence driver.JobFence
	// claimSent is when the claim that granted the lease was sent (local
	// monotonic clock).
	claimSent time.Time

	mu          sync.Mutex
	result      []byte
	completedTx atomic.Bool
	// ended is set by whoever makes the claim's final write: the executor,
	// or Stop releasing the job; the other then writes nothing.
	ended atomic.Bool
	// started is when the claimed job was handed to its goroutine; ran, in
	// nanoseconds, how long it ran once its work returned (zero while it
	// runs). For Metrics.JobRun.
	started time.Time
	ran     atomic.Int64
	// finishing is set, under p.mu, once the work has returned and the
	// claim's final write is on its way (see producer.finishing).
	finishing bool
	// delivered is set, under p.mu, once the finisher has received the
	// claim's end, or the executor is done (see producer.unsent).
	delivered bool

	// ctx is the job's context, cancel cancels it (with a cause); hb
	// heartbeats the lease (lease.go); vctx is the context the worker gets.
	ctx    context.Context
	cancel context.CancelCauseFunc
	hb     keepalive.Loop
	vctx   execCtx
}

// runTime is how long the work ran, or has run so far.
func (ex *execution) runTime() time.Duration {
	if d := ex.ran.Load(); d > 0 {
		return time.Duration(d)
	}
	return time.Since(ex.started)
}

// observe reports how the claim ended to Config.Metrics: a transition
// (when to is not empty) and the run's time and outcome.
func (ex *execution) observe(to, outcome string) {
	m := ex.c.cfg.Metrics
	if to != "" {
		m.JobTransition(ex.rec.Queue, TransitionRunning, to)
	}
	m.JobRun(ex.rec.Queue, outcome, ex.runTime())
}

func (ex *execution) resultBytes() []byte {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.result
}

// log writes one line about the job, carrying job_id, queue, kind and
// attempt.
func (ex *execution) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	l := ex.c.log
	if !l.Enabled(ctx, level) {
		return
	}
	base := []slog.Attr{
		slog.Int64("job_id", ex.rec.ID), slog.String("queue", ex.rec.Queue),
		slog.String("kind", ex.rec.Kind), slog.Int("attempt", ex.fence.Attempt),
	}
	l.LogAttrs(ctx, level, msg, append(base, attrs...)...)
}
