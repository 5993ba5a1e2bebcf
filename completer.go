package idem

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// Runs is a registry of named runs, so that a Completer can resume a run
// whose caller went away. Register each run with AddRun at start-up, in
// every process that may resume it. Safe for concurrent use.
type Runs struct {
	mu  sync.RWMutex
	fns map[string]func(r *Run, input []byte) (Result, error)
}

// NewRuns returns an empty registry.
func NewRuns() *Runs { return &Runs{fns: map[string]func(*Run, []byte) (Result, error){}} }

// NamedRun is a run registered under a name, with its input type.
type NamedRun[In any] struct {
	name string
	fn   func(r *Run, in In) (Result, error)
}

// AddRun registers fn under name. The input is stored as JSON with the
// run (so In must round-trip through encoding/json) and handed to fn again
// when a Completer resumes it. A name registered twice panics: names
// identify code, and a run started under one name must resume under it
// (register changed steps under a new name; see docs/steps.md).
func AddRun[In any](rs *Runs, name string, fn func(r *Run, in In) (Result, error)) *NamedRun[In] {
	if err := checkText("run name", name, 1, MaxKeyLen); err != nil {
		panic(err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, dup := rs.fns[name]; dup {
		panic(fmt.Sprintf("idem: run %q registered twice", name))
	}
	rs.fns[name] = func(r *Run, input []byte) (Result, error) {
		var in In
		if err := json.Unmarshal(input, &in); err != nil {
			return Result{}, Permanent(fmt.Errorf("idem: run %q: input does not decode into %T: %w", name, in, err))
		}
		return fn(r, in)
	}
	return &NamedRun[In]{name: name, fn: fn}
}

// Name returns the name the run is registered under.
func (n *NamedRun[In]) Name() string { return n.name }

// Run is Ledger.Run for a registered run: the run's name and input are
// stored with its checkpoints, so that a Completer resumes it if the
// caller goes away before it finishes.
func (n *NamedRun[In]) Run(ctx context.Context, l *Ledger, op Op, in In) (Result, error) {
	input, err := json.Marshal(in)
	if err != nil {
		return Result{}, &InputError{Field: "run input", Reason: err.Error()}
	}
	if len(input) > MaxStepResultLen {
		return Result{}, &InputError{Field: "run input", Reason: fmt.Sprintf("is %d bytes of JSON, more than %d", len(input), MaxStepResultLen)}
	}
	return l.runNamed(ctx, op, n.name, input, func(r *Run) (Result, error) { return n.fn(r, in) })
}

// CompleterOptions configures a Completer. Nil means all defaults.
type CompleterOptions struct {
	// Interval is the time between sweeps. Default 1s.
	Interval time.Duration
	// Limit bounds the runs one sweep resumes. Default 100.
	Limit int
	// Lease is the lease a resumed run is claimed with. Default: the
	// ledger's.
	Lease time.Duration
}

// Completer drives abandoned runs to completion without their callers:
// runs registered in a Runs whose holder died or lost its lease are
// claimed (with a newer token, as any retry would) and resumed from their
// last checkpoint. Several completers, in several processes, may sweep one
// database: each run is resumed by one of them at a time.
type Completer struct {
	l    *Ledger
	runs *Runs
	opts CompleterOptions
}

// NewCompleter returns a completer of the runs registered in rs.
func NewCompleter(l *Ledger, rs *Runs, opts *CompleterOptions) *Completer {
	var o CompleterOptions
	if opts != nil {
		o = *opts
	}
	o.Interval = cmp.Or(o.Interval, time.Second)
	o.Limit = cmp.Or(o.Limit, 100)
	return &Completer{l: l, runs: rs, opts: o}
}

// Run sweeps every Interval until ctx ends, and returns ctx's error.
// Errors of single runs are logged; the sweep goes on.
func (c *Completer) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		if _, err := c.CompleteOnce(ctx); err != nil && ctx.Err() == nil {
			c.l.log.WarnContext(ctx, "completer sweep failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// CompleteOnce resumes, one after another, up to Limit abandoned runs, and
// returns how many it finished (succeeded or failed for good). A run that
// another process resumed first, or whose name is not registered here, is
// skipped; a run that parks or fails again is logged and left.
func (c *Completer) CompleteOnce(ctx context.Context) (int, error) {
	refs, err := c.l.drv.StaleRuns(ctx, c.opts.Limit)
	if err != nil {
		return 0, fmt.Errorf("idem: completer: %w", err)
	}
	done := 0
	for _, ref := range refs {
		if ctx.Err() != nil {
			return done, ctx.Err()
		}
		ok, err := c.resume(ctx, ref)
		if ok {
			done++
		}
		if err != nil {
			c.l.log.WarnContext(ctx, "completer could not finish a run", slog.String("scope", ref.Scope),
				slog.String("key", c.l.keyName(ref.Key)), slog.String("error", err.Error()))
		}
	}
	return done, nil
}

func (c *Completer) resume(ctx context.Context, ref idemtype.RunRef) (bool, error) {
	rec, err := c.l.drv.Get(ctx, ref.Scope, ref.Key)
	if err != nil {
		return false, err
	}
	steps, err := c.l.drv.StepList(ctx, ref.Scope, ref.Key)
	if err != nil || len(steps) == 0 || steps[0].Index != -1 {
		return false, err // finished meanwhile
	}
	h := steps[0]
	c.runs.mu.RLock()
	fn := c.runs.fns[h.Name]
	c.runs.mu.RUnlock()
	if fn == nil {
		return false, fmt.Errorf("run %q is not registered with this completer", h.Name)
	}
	op := Op{Scope: ref.Scope, Key: ref.Key, Fingerprint: rec.Fingerprint, Retention: rec.Retention, Lease: c.opts.Lease}
	_, err = c.l.runNamed(ctx, op, h.Name, h.Result, func(r *Run) (Result, error) { return fn(r, h.Result) })
	switch {
	case err == nil, errors.Is(err, ErrFailed):
		return true, nil
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrMismatch):
		return false, nil // another resumer was first, or the key was reused meanwhile
	}
	return false, err
}
