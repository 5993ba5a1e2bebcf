package idem

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
)

// MaxStepResultLen bounds a step's checkpointed result, in bytes of JSON.
const MaxStepResultLen = 64 << 10

// ErrStepResult means a step's result cannot be checkpointed: it does not
// marshal to JSON, or is longer than MaxStepResultLen. It is Permanent: a
// run that returns it fails instead of retrying forever.
var ErrStepResult = errors.New("idem: step result cannot be checkpointed")

// StepKey is the key of the external step called step in the run of
// (scope, key): the same on every host and every attempt, so a downstream
// that deduplicates on it sees one operation. It is "idem-" and 40 hex
// digits of a SHA-256 over the three names.
func StepKey(scope, key, step string) string {
	h := sha256.New()
	for _, s := range []string{scope, key, step} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// TxStep runs fn, a step whose effect is local, exactly once in the run:
// its writes in tx and the step's checkpoint commit together, fenced by the
// run's token, so a holder that lost its lease commits nothing. On resume
// a step already done is not run; its recorded result is returned.
//
// The result is stored as JSON (at most MaxStepResultLen bytes) and
// decoded into T on resume, so T should round-trip through encoding/json.
// An error from fn rolls tx back and is returned. On SQLite tx holds the
// database's single writer: fn must not call other ledger methods.
func TxStep[T any](r *Run, name string, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	i, rec, err := r.begin(name)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		if rec.State == idemtype.StepDone {
			return decodeStep[T](r, rec)
		}
		return zero, r.order(fmt.Errorf("%w: step %d %q is an external step in the checkpoints", ErrStepOrder, i, name))
	}
	l, c := r.l, r.c
	tx, end, err := l.drv.Begin(r.bg)
	if err != nil {
		return zero, fmt.Errorf("idem: run %s: step %q: begin: %w", l.keyName(c.Op.Key), name, err)
	}
	ended := false
	defer func() {
		if !ended {
			tx.Rollback()
			end()
		}
	}()
	v, err := fn(r.ctx, tx)
	if err != nil {
		return zero, err
	}
	b, err := encodeStep(name, v)
	if err != nil {
		return zero, err
	}
	ex, err := l.drv.Executor(tx)
	if err != nil {
		return zero, err
	}
	if err := r.save(ex, idemtype.Step{Index: i, Name: name, State: idemtype.StepDone, Result: b}); err != nil {
		return zero, err
	}
	r.rows = true
	crashpoint.Hit(crashpoint.StepBeforeCommit)
	ended = true
	err = tx.Commit()
	end()
	if err != nil {
		// The step may have committed: only a new attempt can tell.
		r.err = fmt.Errorf("idem: run %s: step %q: commit (outcome unknown; retry with the same key): %w", l.keyName(c.Op.Key), name, err)
		return zero, r.err
	}
	crashpoint.Hit(crashpoint.StepAfterCheckpoint)
	r.observeStep(name, StepRan)
	return v, nil
}

// StepOption configures CallStep.
type StepOption[T any] func(*stepConfig[T])

type stepConfig[T any] struct {
	lookup func(ctx context.Context, key string) (T, Verdict, error)
}

// StepLookup gives an external step a lookup, asked when a resumed run
// finds the step started and its outcome unrecorded (the previous holder
// died or lost its lease during the call). It answers by the step's key:
//
//   - VerdictDone with the call's result: the result is checkpointed and
//     the step is not run again;
//   - VerdictNotDone: the step runs again with the same key (a provider
//     that deduplicates on the key may always answer this);
//   - VerdictFailed: the step failed for good; the run fails permanently;
//   - VerdictUnknown: the run parks for an operator.
//
// An error leaves the run to a later attempt.
func StepLookup[T any](fn func(ctx context.Context, key string) (T, Verdict, error)) StepOption[T] {
	return func(c *stepConfig[T]) { c.lookup = fn }
}

// CallStep runs fn, a step whose effect is external (a payment provider,
// an email service), at least once with a stable key: fn gets
// StepKey(scope, key, name), the same on every attempt and host, and must
// forward it downstream. Its result is checkpointed after fn returns; on
// resume a step already done is not run, and its recorded result is
// returned.
//
// The step is marked started before fn runs. If a later attempt finds it
// started but not done, the outcome is unknown and the step's lookup
// (StepLookup) decides; without a lookup the run parks. An error from fn
// is returned and leaves the step started: the next attempt asks the
// lookup too, since a failed call may still have had its effect.
func CallStep[T any](r *Run, name string, fn func(ctx context.Context, key string) (T, error), opts ...StepOption[T]) (T, error) {
	var zero T
	var cfg stepConfig[T]
	for _, o := range opts {
		o(&cfg)
	}
	i, rec, err := r.begin(name)
	if err != nil {
		return zero, err
	}
	key := r.StepKey(name)
	switch {
	case rec == nil:
		if err := r.save(driver.Shared, idemtype.Step{Index: i, Name: name, State: idemtype.StepStarted}); err != nil {
			return zero, err
		}
		r.rows = true
		crashpoint.Hit(crashpoint.StepStarted)
	case rec.State == idemtype.StepDone:
		return decodeStep[T](r, rec)
	case rec.State != idemtype.StepStarted:
		return zero, r.order(fmt.Errorf("%w: step %d %q is a %s step in the checkpoints", ErrStepOrder, i, name, rec.State))
	case r.released:
		// An operator released the parked run: the call did not happen.
	case cfg.lookup == nil:
		r.observeStep(name, StepParked)
		return zero, r.park(fmt.Errorf("step %q: outcome unknown and no StepLookup", name))
	default:
		v, verdict, err := cfg.lookup(r.ctx, key)
		r.l.logOp(r.bg, slog.LevelInfo, "step outcome looked up", r.c.Op, r.c.Token, slog.String("step", name), slog.String("verdict", verdict.String()))
		if err != nil {
			return zero, fmt.Errorf("idem: run %s: step %q: lookup: %w", r.l.keyName(r.c.Op.Key), name, err)
		}
		switch verdict {
		case VerdictDone:
			r.observeStep(name, StepFound)
			return checkpointCall(r, i, name, v)
		case VerdictNotDone:
		case VerdictFailed:
			r.observeStep(name, StepFailed)
			return zero, Permanent(fmt.Errorf("idem: run %s: step %q failed downstream (lookup)", r.l.keyName(r.c.Op.Key), name))
		default:
			r.observeStep(name, StepParked)
			return zero, r.park(fmt.Errorf("step %q: lookup cannot tell the outcome", name))
		}
	}
	v, err := fn(r.ctx, key)
	if err != nil {
		return zero, err
	}
	crashpoint.Hit(crashpoint.StepAfterCall)
	return checkpointCall(r, i, name, v)
}

func checkpointCall[T any](r *Run, i int, name string, v T) (T, error) {
	var zero T
	b, err := encodeStep(name, v)
	if err != nil {
		return zero, err
	}
	if err := r.save(driver.Shared, idemtype.Step{Index: i, Name: name, State: idemtype.StepDone, Result: b}); err != nil {
		return zero, err
	}
	crashpoint.Hit(crashpoint.StepAfterCheckpoint)
	r.observeStep(name, StepRan)
	return v, nil
}

// begin takes the next step position for name, and returns the step
// recorded there by an earlier attempt, if any.
func (r *Run) begin(name string) (int, *idemtype.Step, error) {
	if r.err != nil {
		return 0, nil, r.err
	}
	if err := checkText("step name", name, 1, MaxKeyLen); err != nil {
		r.err = Permanent(err)
		return 0, nil, r.err
	}
	if r.names[name] {
		r.err = Permanent(&InputError{Field: "step name", Reason: fmt.Sprintf("%q is used twice in one run", name)})
		return 0, nil, r.err
	}
	if err := context.Cause(r.ctx); err != nil {
		return 0, nil, err
	}
	i := r.next
	r.next++
	r.names[name] = true
	rec, ok := r.steps[i]
	if !ok {
		return i, nil, nil
	}
	if rec.Name != name {
		return i, nil, r.order(fmt.Errorf("%w: step %d is %q in the checkpoints, %q in the code", ErrStepOrder, i, rec.Name, name))
	}
	if rec.State == idemtype.StepDone {
		r.observeStep(name, StepReplayed)
	}
	return i, &rec, nil
}

func encodeStep(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("%w: step %q: %w", ErrStepResult, name, err))
	}
	if len(b) > MaxStepResultLen {
		return nil, Permanent(fmt.Errorf("%w: step %q: result is %d bytes of JSON, more than %d", ErrStepResult, name, len(b), MaxStepResultLen))
	}
	return b, nil
}

func decodeStep[T any](r *Run, rec *idemtype.Step) (T, error) {
	var v T
	if err := json.Unmarshal(rec.Result, &v); err != nil {
		return v, r.order(fmt.Errorf("%w: step %d %q: checkpoint does not decode into %T: %w", ErrStepOrder, rec.Index, rec.Name, v, err))
	}
	return v, nil
}

func (r *Run) observeStep(name string, o StepOutcome) {
	r.l.observe(r.bg, Event{Kind: EventStep, Op: r.c.Op, Attempt: r.c.Token, Step: name, StepOutcome: o})
}
