package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// ErrStepOrder means a resumed run met steps other than the ones its
// checkpoints recorded (the code changed between attempts): a different
// name at a position, a step kind changed, or recorded steps left over at
// the end. The run is parked instead of guessing; see docs/steps.md.
var ErrStepOrder = errors.New("idem: run's steps differ from its checkpoints")

// RunFunc is the body of a multi-step run: it calls TxStep and CallStep in
// a fixed order and returns the run's final result. It must return the
// error of a step that failed (or a wrapper of it). A step that returned an
// error makes the run fail even if RunFunc ignores it.
type RunFunc func(r *Run) (Result, error)

// Run is one attempt at a multi-step operation, handed to a RunFunc. Its
// steps are checkpointed under the run's claim: a later attempt (a retry
// of the same op, or a Completer) skips the steps already done and gets
// their recorded results. A Run is not safe for concurrent use: steps run
// one after another.
type Run struct {
	l   *Ledger
	c   *Claim
	ctx context.Context // cancelled with ErrLeaseLost when the lease is lost
	bg  context.Context // the caller's values, never cancelled: checkpoints

	steps    map[int]idemtype.Step // recorded by earlier attempts, by index
	released bool                  // the key was released while unfinished: started steps did not happen
	rows     bool                  // this run has step rows: never Release it
	next     int
	names    map[string]bool
	parked   bool
	err      error // sticky: once set, every later step and the run fail with it
}

// Context returns the run's context: the caller's, cancelled with the
// cause ErrLeaseLost once the run's lease is lost.
func (r *Run) Context() context.Context { return r.ctx }

// Op returns the run's operation, with defaults filled in.
func (r *Run) Op() Op { return r.c.Op }

// Resumed reports whether an earlier attempt checkpointed steps of this
// run: those steps are not run again.
func (r *Run) Resumed() bool { return len(r.steps) > 0 }

// StepKey returns the key CallStep hands the step called name, to be
// forwarded downstream.
func (r *Run) StepKey(name string) string { return StepKey(r.c.Op.Scope, r.c.Op.Key, name) }

// Run runs fn as a multi-step operation under op's key: at most one
// attempt runs at a time, each step's checkpoint is fenced by the run's
// token, and the final Result is stored and replayed like Do's.
//
// A retry of the same op after a crash or a lost lease resumes from the
// last checkpoint once the previous attempt's lease ends (until then it
// gets ErrInFlight, like any key in flight). When fn returns an error, a
// run with checkpoints keeps its key and ends its lease at once, so the
// next retry resumes it; a run that checkpointed nothing releases the key,
// as Do does. An error wrapped with Permanent records a failure instead.
// op.Stale is ignored: a stale run is always resumed, and each external
// step's lookup decides about a call whose outcome is unknown.
//
// Errors are Do's, plus: ErrParked when a step's outcome is unknown and
// nothing could decide it (or the code changed under a run, matching
// ErrStepOrder too); the run then waits for an operator (idem reconcile).
func (l *Ledger) Run(ctx context.Context, op Op, fn RunFunc) (Result, error) {
	return l.runNamed(ctx, op, "", nil, fn)
}

// runNamed claims op and drives the run; name and input, for a registered
// run, are recorded in the run's header so that a Completer can resume it.
func (l *Ledger) runNamed(ctx context.Context, op Op, name string, input []byte, fn RunFunc) (Result, error) {
	op.Stale = StaleRedo
	c, err := l.Claim(ctx, op)
	if err != nil {
		return Result{}, err
	}
	if res, done, err := l.unheld(c); done {
		return res, err
	}
	return l.drive(ctx, c, name, input, fn)
}

func (l *Ledger) drive(ctx context.Context, c *Claim, name string, input []byte, fn RunFunc) (res Result, err error) {
	bg := context.WithoutCancel(ctx)
	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.keepAlive(workCtx, c, cancel)
	defer stop()

	r := &Run{l: l, c: c, ctx: workCtx, bg: bg, steps: map[int]idemtype.Step{}, names: map[string]bool{},
		released: c.Outcome == Acquired && c.from == idemtype.StateReleased}
	if err := r.load(name, input); err != nil {
		l.endLease(bg, c)
		return Result{}, err
	}
	defer func() {
		if p := recover(); p != nil {
			r.giveUp()
			panic(p)
		}
	}()
	res, ferr := fn(r)
	if ferr == nil {
		ferr = r.err
	}
	if ferr == nil {
		for i, s := range r.steps {
			if i >= r.next {
				ferr = r.order(fmt.Errorf("%w: step %d %q was checkpointed but the run ended after %d steps", ErrStepOrder, i, s.Name, r.next))
				break
			}
		}
	}
	if ferr != nil {
		return Result{}, r.end(ferr)
	}
	return r.complete(res, stop)
}

// load reads the run's checkpoints. Steps of another life of the key (a
// record that ended and was claimed anew, or another fingerprint after a
// release) are deleted, under the fence, before anything else.
func (r *Run) load(name string, input []byte) error {
	l, c := r.l, r.c
	steps, err := l.drv.StepList(r.bg, c.Op.Scope, c.Op.Key)
	if err != nil {
		return fmt.Errorf("idem: run %s: %w", l.keyName(c.Op.Key), err)
	}
	foreign := c.Outcome == Acquired && c.from != idemtype.StateReleased
	header := false
	for _, s := range steps {
		if s.Fingerprint != c.Op.Fingerprint {
			foreign = true
		}
		if s.Index < 0 {
			header = true
		} else {
			r.steps[s.Index] = s
		}
	}
	if foreign && len(steps) > 0 {
		r.steps, header = map[int]idemtype.Step{}, false
		if err := r.reset(name, input); err != nil {
			return err
		}
		r.rows = name != ""
		return nil
	}
	r.rows = len(steps) > 0
	if name != "" && !header {
		if err := r.save(driver.Shared, idemtype.Step{Index: -1, Name: name, State: idemtype.StepRun, Result: input}); err != nil {
			return err
		}
		r.rows = true
	}
	return nil
}

// reset deletes the key's old steps and writes the run's header, in one
// transaction whose fenced header write keeps a stale holder from deleting
// a successor's steps.
func (r *Run) reset(name string, input []byte) error {
	l, c := r.l, r.c
	tx, end, err := l.drv.Begin(r.bg)
	if err != nil {
		return fmt.Errorf("idem: run %s: begin: %w", l.keyName(c.Op.Key), err)
	}
	defer end()
	defer tx.Rollback()
	ex, err := l.drv.Executor(tx)
	if err != nil {
		return err
	}
	if err := l.drv.StepDelete(r.bg, ex, c.Op.Scope, c.Op.Key); err != nil {
		return err
	}
	// An anonymous run has no header; its fence is checked by an empty one,
	// deleted again at once.
	if err := r.save(ex, idemtype.Step{Index: -1, Name: name, State: idemtype.StepRun, Result: input}); err != nil {
		return err
	}
	if name == "" {
		if err := l.drv.StepDelete(r.bg, ex, c.Op.Scope, c.Op.Key); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("idem: run %s: commit: %w", l.keyName(c.Op.Key), err)
	}
	return nil
}

// save writes one step row under the run's fence. ErrFenced makes the
// run's error sticky ErrLeaseLost.
func (r *Run) save(ex driver.Executor, s idemtype.Step) error {
	err := r.l.drv.StepSave(r.bg, ex, r.c.fence(), s)
	if errors.Is(err, driver.ErrFenced) {
		r.l.observe(r.bg, Event{Kind: EventLeaseLost, Op: r.c.Op, Attempt: r.c.Token})
		r.l.logOp(r.bg, slog.LevelWarn, "lease lost at step checkpoint", r.c.Op, r.c.Token, slog.String("step", s.Name))
		r.err = fmt.Errorf("idem: run %s: step %q: %w", r.l.keyName(r.c.Op.Key), s.Name, ErrLeaseLost)
		return r.err
	}
	if err != nil {
		return fmt.Errorf("idem: run %s: step %q checkpoint: %w", r.l.keyName(r.c.Op.Key), s.Name, err)
	}
	return nil
}

// order parks the run because its code no longer matches its checkpoints.
func (r *Run) order(err error) error {
	r.l.logOp(r.bg, slog.LevelError, "run parked: steps differ from checkpoints", r.c.Op, r.c.Token, slog.String("error", err.Error()))
	return r.park(err)
}

// park records that the run cannot go on without an operator. The
// returned error matches ErrParked and err.
func (r *Run) park(err error) error {
	if r.err != nil {
		return r.err
	}
	if perr := r.l.Park(r.bg, r.c); perr != nil {
		r.err = perr
		return r.err
	}
	r.parked = true
	r.err = fmt.Errorf("idem: run %s parked: %w: %w", r.l.keyName(r.c.Op.Key), ErrParked, err)
	return r.err
}

// end settles a run whose body failed with err.
func (r *Run) end(err error) error {
	l, c := r.l, r.c
	switch {
	case r.parked:
		return err
	case errors.Is(err, ErrLeaseLost):
		return err
	case errors.Is(context.Cause(r.ctx), ErrLeaseLost):
		return fmt.Errorf("idem: run %s: %w: %w", l.keyName(c.Op.Key), ErrLeaseLost, err)
	case IsPermanent(err):
		res := Result{Body: []byte(err.Error())}
		if ferr := r.finish(idemtype.StateFailed, res); ferr != nil {
			return errors.Join(err, ferr)
		}
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	r.giveUp()
	return err
}

// giveUp leaves the run to its next attempt: a run with checkpoints keeps
// its key and ends its lease now, so a retry or a Completer resumes it;
// one without is released, as Do releases.
func (r *Run) giveUp() {
	if r.rows {
		r.l.endLease(r.bg, r.c)
		return
	}
	r.l.releaseQuietly(r.bg, r.c)
}

// endLease ends a held claim's lease without ending the claim, so that the
// next claim reclaims it at once. If this fails the lease ends on its own.
func (l *Ledger) endLease(ctx context.Context, c *Claim) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = l.drv.Heartbeat(ctx, c.fence(), 0)
}

// complete stores the run's result and deletes its steps in one fenced
// transaction.
func (r *Run) complete(res Result, stop func()) (Result, error) {
	stop()
	if err := r.finish(idemtype.StateSucceeded, res); err != nil {
		return Result{}, err
	}
	return res, nil
}

func (r *Run) finish(st idemtype.State, res Result) error {
	l, c := r.l, r.c
	tx, end, err := l.drv.Begin(r.bg)
	if err != nil {
		r.giveUp()
		return fmt.Errorf("idem: run %s: begin: %w", l.keyName(c.Op.Key), err)
	}
	ended := false
	defer func() {
		if !ended {
			tx.Rollback()
			end()
		}
	}()
	ex, err := l.drv.Executor(tx)
	if err != nil {
		return err
	}
	if err := l.finish(r.bg, ex, c, st, res); err != nil {
		return err
	}
	if err := l.drv.StepDelete(r.bg, ex, c.Op.Scope, c.Op.Key); err != nil {
		return err
	}
	ended = true
	err = tx.Commit()
	end()
	if err != nil {
		return fmt.Errorf("idem: run %s: commit (outcome unknown; retry with the same key): %w", l.keyName(c.Op.Key), err)
	}
	return nil
}

// Steps returns a Run over c, a claim the caller holds and will finish
// itself (Complete, Fail, Release, or their Tx forms), so that the work
// under c can be split into TxStep and CallStep steps. The idemhttp
// middleware is such a caller. A later holder of the same key gets, from
// Steps, the steps checkpointed under earlier claims, and skips them.
//
// Finishing c settles the run's records: Complete and Fail delete them
// (in the caller's transaction for the Tx forms); Release of a claim with
// checkpoints ends its lease instead of releasing the key, so the next
// claim resumes the run. The caller keeps c's lease alive and cancels ctx
// when it is lost; steps are fenced by c's token either way. Calling Steps
// again on c returns the same Run.
func (l *Ledger) Steps(ctx context.Context, c *Claim) (*Run, error) {
	if err := checkHeld(c); err != nil {
		return nil, err
	}
	if c.run != nil {
		return c.run, nil
	}
	r := &Run{l: l, c: c, ctx: ctx, bg: context.WithoutCancel(ctx), steps: map[int]idemtype.Step{}, names: map[string]bool{},
		released: c.Outcome == Acquired && c.from == idemtype.StateReleased}
	if err := r.load("", nil); err != nil {
		return nil, err
	}
	c.run = r
	return r, nil
}
