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

// Holder is a lease's holder, as Loop sees it: Config's functions as
// methods, so that the holder's own state can be the loop's and starting it
// makes no closures.
type Holder interface {
	// Heartbeat is Config.Heartbeat.
	Heartbeat(ctx context.Context) error
	// Fenced is Config.Fenced.
	Fenced(err error) bool
	// Lost is Config.Lost.
	Lost(cause error)
	// Failed is Config.Failed.
	Failed(err error)
}

// Start heartbeats until the lease is lost, ctx ends, or stop is called.
// stop waits for the loop to end (cancelling a heartbeat under way); it may
// be called more than once. Nothing runs until the first heartbeat is due:
// a holder done sooner (most requests) costs one timer.
func Start(ctx context.Context, cfg Config) (stop func()) {
	lp := new(Loop)
	lp.Start(ctx, cfg.Lease, cfg.Granted, funcs{&cfg})
	return lp.Stop
}

// funcs is a Config as a Holder.
type funcs struct{ cfg *Config }

func (f funcs) Heartbeat(ctx context.Context) error { return f.cfg.Heartbeat(ctx) }
func (f funcs) Fenced(err error) bool               { return f.cfg.Fenced != nil && f.cfg.Fenced(err) }
func (f funcs) Lost(cause error)                    { f.cfg.Lost(cause) }
func (f funcs) Failed(err error) {
	if f.cfg.Failed != nil {
		f.cfg.Failed(err)
	}
}

// Loop is one keep-alive loop, for a holder that keeps it in its own state
// (a request's, say) instead of the closures and the stop function Start
// allocates. Its zero value is ready for one Start; it must not be copied
// after.
type Loop struct {
	ctx     context.Context
	h       Holder
	lease   time.Duration
	every   time.Duration
	granted time.Time
	// timer is the first tick's; the running loop's cancel and done are set
	// when it fires.
	timer   *time.Timer
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // nil until the loop runs
	done    chan struct{}
}

// Start is the package's Start with h for cfg's functions: it heartbeats
// the lease of length lease, granted when the claim that took it was sent
// (zero: now), until the lease is lost, ctx ends, or Stop is called. Call
// it once per Loop.
func (lp *Loop) Start(ctx context.Context, lease time.Duration, granted time.Time, h Holder) {
	if granted.IsZero() {
		granted = time.Now()
	}
	lp.ctx, lp.h, lp.lease, lp.granted = ctx, h, lease, granted
	lp.every = max(lease/3, time.Millisecond)
	lp.mu.Lock() // the timer may fire before it is stored
	defer lp.mu.Unlock()
	lp.timer = time.AfterFunc(lp.every, lp.run)
}

// run is the first tick: the loop proper, unless stopped already.
func (lp *Loop) run() {
	lp.mu.Lock()
	if lp.stopped {
		lp.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(lp.ctx)
	lp.cancel, lp.done = cancel, make(chan struct{})
	lp.mu.Unlock()
	defer close(lp.done)
	lp.beat(ctx)
}

// Stop ends the loop and waits for it (cancelling a heartbeat under way);
// Lost is never called once it has returned. It may be called more than
// once.
func (lp *Loop) Stop() {
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

// beat heartbeats every lp.every, the first one now, until the lease is
// lost or ctx ends.
func (lp *Loop) beat(ctx context.Context) {
	t := time.NewTicker(lp.every)
	defer t.Stop()
	granted := lp.granted
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
		callCtx, callCancel := context.WithDeadline(ctx, granted.Add(lp.lease))
		err := lp.h.Heartbeat(callCtx)
		callCancel()
		switch {
		case err == nil:
			granted = sent
			continue
		case ctx.Err() != nil:
			return // stopped: the error is ours
		case lp.h.Fenced(err):
			lp.h.Lost(err)
			return
		case time.Since(granted) >= lp.lease:
			lp.h.Lost(fmt.Errorf("%w (%v): %w", ErrUnconfirmed, lp.lease, err))
			return
		}
		lp.h.Failed(err)
	}
}
