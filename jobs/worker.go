package jobs

import (
	"context"
	"fmt"
)

// Worker runs jobs of one kind. Work returning nil completes the job (if
// CompleteTx did not already); an error retries it after backoff, or
// dead-letters it when wrapped with Permanent or out of attempts. A panic
// counts as an error.
//
// ctx is cancelled when the job's lease is lost (context.Cause is then
// ErrLeaseLost), when Config.JobTimeout passes, and when the client stops
// without waiting; Work should return soon after.
type Worker[T Args] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc makes a Worker of a function.
func WorkFunc[T Args](f func(ctx context.Context, job *Job[T]) error) Worker[T] {
	return workFunc[T](f)
}

type workFunc[T Args] func(ctx context.Context, job *Job[T]) error

func (f workFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// Workers maps job kinds to workers. Fill it before New; it must not change
// after.
type Workers struct {
	byKind map[string]runner
}

// NewWorkers returns an empty set of workers.
func NewWorkers() *Workers { return &Workers{byKind: map[string]runner{}} }

// runner runs one claimed job with its arguments decoded to the worker's
// type.
type runner func(ctx context.Context, ex *execution) error

// AddWorker registers w for the kind that the zero T names. It panics if
// the kind is empty or already registered: both are setup mistakes.
func AddWorker[T Args](ws *Workers, w Worker[T]) {
	var zero T
	AddWorkerKind(ws, zero.Kind(), w)
}

// AddWorkerKind registers w for kind, for Raw jobs and for types whose zero
// value has no kind. It panics if kind is empty or already registered.
func AddWorkerKind[T Args](ws *Workers, kind string, w Worker[T]) {
	if err := checkText("kind", kind, maxKindLen); err != nil {
		panic(fmt.Sprintf("jobs: AddWorker: %v (define Kind on a value receiver, or use AddWorkerKind)", err))
	}
	if _, dup := ws.byKind[kind]; dup {
		panic(fmt.Sprintf("jobs: AddWorker: kind %q registered twice", kind))
	}
	ws.byKind[kind] = func(ctx context.Context, ex *execution) error {
		args, err := decodeArgs[T](kind, ex.rec.Args)
		if err != nil {
			return Permanent(err)
		}
		return w.Work(ctx, &Job[T]{JobRow: ex.rec, Args: args, ex: ex})
	}
}

func (ws *Workers) has(kind string) bool {
	if ws == nil {
		return false
	}
	_, ok := ws.byKind[kind]
	return ok
}
