package prove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/jobs"
)

// The periodic attack: three job workers (jobs.Client) each enqueue the
// same periodic job every period (jobs.Every, RunOnStart) and work it,
// writing each job's effect in the transaction they pass to CompleteTx.
// Two of them are armed to die (SIGKILL) at a random job, at one of the
// job path's crash points; a dead worker is replaced, armed or not. Operation k is the
// period that starts k periods after the attack's start. Every period must
// get one job, run once: the unique key per period keeps a second host's
// enqueue out, and a dead worker's job is re-claimed after its lease.
const (
	periodicProcs   = 3
	maxPeriods      = 30
	periodicWarmup  = 3 * time.Second // for the workers to start before the first period
	minPeriodLength = 500 * time.Millisecond
)

func runPeriodic(ctx context.Context, t *trial) error {
	t.noLedger = true
	queue := "periodic-" + t.r.runID
	period := max(2*t.lease, minPeriodLength)
	t.keys = t.keys[:min(len(t.keys), maxPeriods)]
	start := jobs.Every(period).Next(time.Now().Add(periodicWarmup))
	end := start.Add(time.Duration(len(t.keys)) * period)
	jc, err := jobs.New(t.r.ledger, &jobs.Config{Queues: map[string]jobs.QueueConfig{queue: {}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}

	work := spec{Role: roleJobs, Jobs: "periodic", Queue: queue, PeriodMS: period.Milliseconds(), StartMS: start.UnixMilli(), Periods: len(t.keys)}
	points := []string{crashpoint.JobAfterClaim, crashpoint.JobBeforeCommit, crashpoint.JobAfterCommit}
	startWorker := func(armed bool) (*proc, error) {
		crash := ""
		if armed {
			crash = fmt.Sprintf("%s:%d", points[t.intN(len(points))], 1+t.intN(3))
		}
		p, err := t.start(ctx, work, crash)
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(ctx, evReady); err != nil {
			return nil, err
		}
		return p, nil
	}
	// The first worker is never armed, so that one is always up: a period
	// that begins and ends with every worker dead is skipped, by design.
	var workers []*proc
	for i := range periodicProcs {
		p, err := startWorker(i > 0)
		if err != nil {
			return err
		}
		workers = append(workers, p)
	}
	if time.Now().After(start) {
		t.note("the workers were ready %v after the first period began", time.Since(start).Round(time.Millisecond))
	}
	// Replace the dead until every period has passed and has its effect.
	deadline := time.Now().Add(t.deadline)
	for {
		for i, p := range workers {
			select {
			case <-p.done:
				if err := p.wait(ctx, true); err != nil {
					return err
				}
				if workers[i], err = startWorker(i > 0 && t.intN(2) == 0); err != nil {
					return err
				}
			default:
			}
		}
		if time.Now().After(end) {
			effects, err := t.effects(ctx)
			if err != nil {
				return err
			}
			if len(effects) == len(t.keys) || time.Now().After(deadline) {
				break
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var errs []error
	for _, p := range workers {
		p.stdin.Close() // stop: finish running jobs and exit
	}
	for _, p := range workers {
		errs = append(errs, p.wait(ctx, true))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	rows, err := jc.List(ctx, &jobs.ListParams{Queue: queue, KeyPrefix: periodicKeyPrefix(queue), Limit: 10000})
	if err != nil {
		return err
	}
	perPeriod := make([]int, len(t.keys))
	running := 0
	for _, r := range rows {
		k, ok := periodIndex(r.UniqueKey, queue, start, period, len(t.keys))
		if !ok {
			// A period after the measured ones: its job may have been
			// claimed by a worker that then died, and waits out its lease.
			continue
		}
		perPeriod[k]++
		if r.State == idemtype.JobRunning {
			running++
		}
	}
	t.counts = func(r *Result) {
		r.Stuck += running
		for k, n := range perPeriod {
			if n != 1 && !t.r.cfg.NoGuard {
				t.fail("period %d (%s) has %d jobs, want 1", k, t.keys[k], n)
			}
		}
	}
	return nil
}

func periodicKeyPrefix(name string) string {
	return jobs.PeriodicKey(name, time.Time{})[:len("periodic:"+name+":")]
}

// periodIndex is the operation index of a periodic job's key: which
// period after start it belongs to, if one of the first n.
func periodIndex(key, name string, start time.Time, period time.Duration, n int) (int, bool) {
	at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(key, periodicKeyPrefix(name)))
	if err != nil || at.Before(start) {
		return 0, false
	}
	k := int(at.Sub(start) / period)
	return k, k < n
}

// runPeriodicWorker enqueues the periodic job every period and works it
// until stdin ends: each job of one of the attack's periods writes its
// effect under that period's operation key.
func (w *worker) runPeriodicWorker(ctx context.Context) error {
	period := time.Duration(w.s.PeriodMS) * time.Millisecond
	start := time.UnixMilli(w.s.StartMS)
	var execs atomic.Int64
	ws := jobs.NewWorkers()
	jobs.AddWorkerKind(ws, jobKind, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[jobs.Raw]) error {
		k, ok := periodIndex(j.UniqueKey, w.s.Queue, start, period, w.s.Periods)
		if !ok {
			return nil // before or after the attack's periods
		}
		op := fmt.Sprintf("op-%05d", k)
		g := int(execs.Add(1))
		w.out.emit(wireEvent{Ev: evInvoke, G: g, Key: op})
		body := jobBody(j.ID)
		err := w.jobEffect(ctx, j, op, body)
		switch {
		case err == nil:
			w.out.emit(wireEvent{Ev: evOK, G: g, Key: op, Body: body})
		case errors.Is(err, idem.ErrLeaseLost):
			w.out.emit(wireEvent{Ev: evFail, G: g, Key: op, Kind: failLeaseLost, Err: err.Error()})
		default:
			w.out.emit(wireEvent{Ev: evUnknown, G: g, Key: op, Err: err.Error()})
		}
		return err
	}))
	args, _ := json.Marshal(jobArgs{})
	c, err := w.jobsClient(ws, 4, jobs.PeriodicJob{
		Name: w.s.Queue, Schedule: jobs.Every(period), RunOnStart: true,
		Args: func() (jobs.Args, *jobs.EnqueueOpts) {
			return jobs.Raw{Name: jobKind, Data: args}, &jobs.EnqueueOpts{Queue: w.s.Queue}
		},
	})
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
