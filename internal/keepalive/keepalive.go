// Package keepalive heartbeats a lease while its holder works: the one
// keep-alive loop behind Ledger.Do, idemhttp and jobs.
//
// A heartbeat goes every third of the lease. The holder is told its lease
// is lost, once, in two cases:
//
//   - a heartbeat is fenced out (Config.Fenced): another holder took the
//     lease;
//   - no heartbeat has succeeded for a whole lease, counting from the
//     sending of the last one that did (or from Config.Granted): the
//     database may have let the lease end, and another holder may take it
//     at any moment, so the lease can no longer be trusted.
//
// Either way the loop stops; the holder should cancel its work, since its
// fenced writes will be refused anyway. Heartbeats that fail for less than
// a lease (a slow or briefly unreachable database) are retried at the next
// tick. A heartbeat may take longer than a tick (ticks are skipped
// meanwhile), but it is cut off when the lease ends, so a hung call cannot
// hide a lost lease.
package keepalive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrUnconfirmed is the cause given to Config.Lost when no heartbeat
// succeeded for a whole lease. It wraps the last heartbeat's error.
var ErrUnconfirmed = errors.New("no heartbeat succeeded for a whole lease")

// Config says what to heartbeat and whom to tell.
type Config struct {
	// Lease is the lease's length. Heartbeats go every third of it (at
	// least every millisecond).
	Lease time.Duration
	// Granted is when the lease was last known to be granted: when the
	// claim that took it was sent. Zero means when Start is called.
	Granted time.Time
	// Heartbeat extends the lease. Its context ends when the lease does
	// (counting from the last heartbeat that succeeded), or when the loop
	// stops.
	Heartbeat func(ctx context.Context) error
	// Fenced reports whether a heartbeat's error means the lease was taken
	// over. Nil means no error does.
	Fenced func(err error) bool
	// Lost is called at most once, from the loop, when the lease is lost:
	// with the fenced heartbeat's error, or with an error matching
	// ErrUnconfirmed. Never called once stop has returned.
	Lost func(cause error)
	// Failed, if set, is told of each failed heartbeat that did not end the
	// lease, for logging.
	Failed func(err error)
}

// Start heartbeats until the lease is lost, ctx ends, or stop is called.
// stop waits for the loop to end (cancelling a heartbeat under way); it may
// be called more than once. Nothing runs until the first heartbeat is due:
// a holder done sooner (most requests) costs one timer.
func Start(ctx context.Context, cfg Config) (stop func()) {
	every := max(cfg.Lease/3, time.Millisecond)
	granted := cfg.Granted
	if granted.IsZero() {
		granted = time.Now()
	}
	lp := &loop{}
	lp.timer = time.AfterFunc(every, func() {
		lp.mu.Lock()
		if lp.stopped {
			lp.mu.Unlock()
			return
		}
		ctx, lp.cancel = context.WithCancel(ctx)
		lp.done = make(chan struct{})
		lp.mu.Unlock()
		defer close(lp.done)
		beat(ctx, cfg, every, granted)
	})
	return lp.stop
}

// loop is one Start's state: its first tick's timer, then the running
// loop's cancel and done.
type loop struct {
	timer   *time.Timer
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // nil until the loop runs
	done    chan struct{}
}

func (lp *loop) stop() {
	lp.mu.Lock()
	lp.stopped = true
	lp.timer.Stop()
	cancel, done := lp.cancel, lp.done
	lp.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// beat heartbeats every every, the first one now, until the lease is lost
// or ctx ends.
func beat(ctx context.Context, cfg Config, every time.Duration, granted time.Time) {
	t := time.NewTicker(every)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		sent := time.Now()
		// A slow heartbeat still extends the lease when it lands, until
		// the lease has ended: then it is no use, and waiting longer
		// would hide the loss.
		callCtx, callCancel := context.WithDeadline(ctx, granted.Add(cfg.Lease))
		err := cfg.Heartbeat(callCtx)
		callCancel()
		switch {
		case err == nil:
			granted = sent
			continue
		case ctx.Err() != nil:
			return // stopped: the error is ours
		case cfg.Fenced != nil && cfg.Fenced(err):
			cfg.Lost(err)
			return
		case time.Since(granted) >= cfg.Lease:
			cfg.Lost(fmt.Errorf("%w (%v): %w", ErrUnconfirmed, cfg.Lease, err))
			return
		}
		if cfg.Failed != nil {
			cfg.Failed(err)
		}
	}
}
