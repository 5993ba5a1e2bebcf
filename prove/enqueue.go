package prove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/jobs"
)

// The double enqueue: two producers, started together, each enqueue every
// operation twice as a job whose unique key is the operation's key, while
// job workers (jobs.Client) run the queue, writing each job's effect in
// the transaction they pass to CompleteTx. Each worker is armed to die at
// a random job, at a random one of the job path's crash points (after the
// claim, before the commit, after the commit); a dead worker is replaced.
// Every job must run once: a duplicate enqueue returns the first job, and
// a dead worker's job is re-claimed after its lease and fenced.
const (
	jobKind      = "prove"
	enqueueTwice = 2
	producers    = 2
)

func skipDoubleEnqueue(*runner) string { return "" }

func runDoubleEnqueue(ctx context.Context, t *trial) error {
	t.noLedger = true
	queue := "prove-" + t.r.runID
	jc, err := jobs.New(t.r.ledger, &jobs.Config{
		Queues: map[string]jobs.QueueConfig{queue: {}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}

	work := spec{Role: roleJobs, Jobs: "work", Queue: queue}
	var mu sync.Mutex
	var workers []*proc
	startWorker := func(armed bool) error {
		crash := ""
		if armed {
			points := []string{crashpoint.JobAfterClaim, crashpoint.JobBeforeCommit, crashpoint.JobAfterCommit}
			crash = fmt.Sprintf("%s:%d", points[t.intN(len(points))], 1+t.intN(3))
		}
		p, err := t.start(ctx, work, crash)
		if err != nil {
			return err
		}
		if _, err := p.expect(ctx, evReady); err != nil {
			return err
		}
		mu.Lock()
		workers = append(workers, p)
		mu.Unlock()
		return nil
	}
	for range t.r.cfg.Workers {
		if err := startWorker(true); err != nil {
			return err
		}
	}

	prod := spec{Role: roleJobs, Jobs: "enqueue", Queue: queue, Keys: t.shuffled(), WaitGo: true, RetryErrors: true}
	var ps []*proc
	for range producers {
		p, err := t.start(ctx, prod, "")
		if err != nil {
			return err
		}
		if _, err := p.expect(ctx, evReady); err != nil {
			return err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.send("go")
	}
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.wait(ctx, false))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("producers: %w", err)
	}

	// Keep Workers workers alive until the queue has nothing left to run.
	for {
		mu.Lock()
		live := workers[:0]
		for _, p := range workers {
			select {
			case <-p.done:
				if err := p.wait(ctx, true); err != nil {
					mu.Unlock()
					return err
				}
			default:
				live = append(live, p)
			}
		}
		workers = live
		missing := t.r.cfg.Workers - len(workers)
		mu.Unlock()
		for range missing {
			if err := startWorker(false); err != nil {
				return err
			}
		}
		n, err := jc.Counts(ctx, queue)
		if err != nil {
			return err
		}
		if n[idemtype.JobAvailable] == 0 && n[idemtype.JobRunning] == 0 {
			break
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	for _, p := range workers {
		p.stdin.Close() // stop: finish running jobs and exit
	}
	for _, p := range workers {
		errs = append(errs, p.wait(ctx, true))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	n, err := jc.Counts(ctx, queue)
	if err != nil {
		return err
	}
	t.counts = func(r *Result) {
		r.Stuck += n[idemtype.JobRunning]
		if d := n[idemtype.JobDead]; d > 0 {
			t.fail("%d jobs dead-lettered", d)
		}
		total := 0
		for _, c := range n {
			total += c
		}
		if total != len(t.keys) && !t.r.cfg.NoGuard {
			t.fail("%d jobs in the queue for %d unique keys", total, len(t.keys))
		}
	}
	return nil
}

// jobArgs are a prover job's arguments.
type jobArgs struct {
	Op string `json:"op"`
}

func (w *worker) jobsClient(ws *jobs.Workers, maxWorkers int, periodic ...jobs.PeriodicJob) (*jobs.Client, error) {
	return jobs.New(w.l, &jobs.Config{
		PeriodicJobs: periodic,
		Queues:       map[string]jobs.QueueConfig{w.s.Queue: {MaxWorkers: maxWorkers}},
		Workers:      ws,
		Lease:        max(w.lease, jobs.MinLease),
		PollInterval: 50 * time.Millisecond,
		MaxAttempts:  jobs.MaxAttemptLimit,
		Logger:       slog.New(slog.NewTextHandler(w.stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
}

// runJobs is a producer (enqueue every key twice, unique key = the key)
// or a job worker (until stdin ends).
func (w *worker) runJobs(ctx context.Context) error {
	switch w.s.Jobs {
	case "enqueue":
		return w.runEnqueue(ctx)
	case "work":
		return w.runJobWorker(ctx)
	case "periodic":
		return w.runPeriodicWorker(ctx)
	}
	return fmt.Errorf("unknown jobs role %q", w.s.Jobs)
}

func (w *worker) runEnqueue(ctx context.Context) error {
	c, err := w.jobsClient(nil, 0)
	if err != nil {
		return err
	}
	if w.s.WaitGo {
		w.waitGo()
	}
	enqueue := func(ctx context.Context, key string) (string, bool, error) {
		opts := &jobs.EnqueueOpts{Queue: w.s.Queue, UniqueKey: key}
		if w.s.NoGuard {
			opts.UniqueKey = ""
		}
		args, _ := json.Marshal(jobArgs{Op: key})
		res, err := c.Enqueue(ctx, jobs.Raw{Name: jobKind, Data: args}, opts)
		if err != nil {
			return "", false, err
		}
		return jobBody(res.Job.ID), res.Duplicate, nil
	}
	for _, k := range w.s.Keys {
		time.Sleep(time.Duration(w.s.PaceMS) * time.Millisecond)
		for range enqueueTwice {
			w.settle(ctx, 0, k, enqueue)
		}
	}
	return nil
}

// jobBody is what both an enqueue and a job's effect say about a job, so
// that the no-mix-up check compares them.
func jobBody(id int64) string { return fmt.Sprintf(`{"job":%d}`, id) }

func (w *worker) runJobWorker(ctx context.Context) error {
	var execs atomic.Int64
	ws := jobs.NewWorkers()
	jobs.AddWorkerKind(ws, jobKind, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[jobs.Raw]) error {
		var a jobArgs
		if err := json.Unmarshal(j.Args.Data, &a); err != nil {
			return jobs.Permanent(err)
		}
		g := int(execs.Add(1)) // every execution is its own line of attempts
		w.out.emit(wireEvent{Ev: evInvoke, G: g, Key: a.Op})
		body := jobBody(j.ID)
		err := w.jobEffect(ctx, j, a.Op, body)
		switch {
		case err == nil:
			w.out.emit(wireEvent{Ev: evOK, G: g, Key: a.Op, Body: body})
		case errors.Is(err, idem.ErrLeaseLost):
			w.out.emit(wireEvent{Ev: evFail, G: g, Key: a.Op, Kind: failLeaseLost, Err: err.Error()})
		default:
			w.out.emit(wireEvent{Ev: evUnknown, G: g, Key: a.Op, Err: err.Error()})
		}
		return err
	}))
	c, err := w.jobsClient(ws, 4)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	w.out.emit(wireEvent{Ev: evReady})
	io.Copy(io.Discard, w.in)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Stop(sctx)
}

// jobEffect writes the job's effect and completes it in one transaction.
func (w *worker) jobEffect(ctx context.Context, j *jobs.Job[jobs.Raw], key, body string) error {
	tx, err := j.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := insertEffect(ctx, tx, w.rebind, w.s.Scope, key, body); err != nil {
		return err
	}
	if err := j.CompleteTx(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}
