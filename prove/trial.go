package prove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// trial is one scenario (or variant) being run: its keys, its history,
// its workers and what it found.
type trial struct {
	r        *runner
	name     string
	variant  string
	attempt  int // 1, or more when the attempts before were inconclusive
	scope    string
	keys     []string
	rngMu    sync.Mutex
	rng      *rand.Rand
	lease    time.Duration
	deadline time.Duration // how long a worker keeps retrying one operation
	h        *history

	// effects reads where the effects happened: key → one entry per
	// effect. Default: the effects table.
	effects func(ctx context.Context) (map[string][]string, error)
	// effectsUnknown: nobody can count the effects; countOnly: they are
	// counted, but their results are not known.
	effectsUnknown, countOnly bool
	// allowParked: parking is a correct end for an operation (a provider
	// that can neither deduplicate nor be asked).
	allowParked bool
	// noLedger: the operations are not ledger keys (jobs), so the ledger
	// is not consulted.
	noLedger bool
	// ledgerKey maps an operation to its ledger key in the trial's scope.
	// Default: the operation's key.
	ledgerKey func(op string) string
	// counts fills scenario-specific counters into the result.
	counts func(*Result)
	// workerDB, when set, is the database URL workers and gateways get
	// instead of the run's (a proxy in front of it).
	workerDB string
	// expectLoss: the scenario allows the loss of acknowledged operations
	// (asynchronous replication) and must detect it: lost operations are
	// counted but are not a failure, finding none is.
	expectLoss bool
	// after runs once the trial has been checked (restoring what the
	// scenario changed in the runner).
	after []func()

	mu       sync.Mutex
	failures []string
	notes    []string
	procs    []*proc
}

// maxAttempts bounds the runs of a trial that ends inconclusive: a fault
// outside idem (RabbitMQ now and then comes back from its SIGKILL without
// the durable queue and the messages in it) means nothing was tested, so
// the trial runs again, on a new broker, queue and scope.
const maxAttempts = 3

func (r *runner) runTrial(ctx context.Context, i int, sel selected) Result {
	var again []string
	for attempt := 1; ; attempt++ {
		res, inc := r.runAttempt(ctx, i, sel, attempt)
		if inc == "" {
			res.Notes = append(again, res.Notes...)
			return res
		}
		if attempt == maxAttempts || ctx.Err() != nil {
			res.Reason = "inconclusive: " + inc
			if len(again) > 0 {
				res.Reason += fmt.Sprintf(" (attempt %d of %d; the others alike)", attempt, maxAttempts)
			}
			r.prog.skipped(i, res.Name, res.Reason)
			return res
		}
		again = append(again, fmt.Sprintf("attempt %d inconclusive (%s); ran again on a new broker, queue and scope", attempt, inc))
		r.prog.again(i, res.Name, inc)
	}
}

// runAttempt runs one attempt of a trial. A trial that ends inconclusive
// is returned skipped with inc, its reason, and no line of progress.
func (r *runner) runAttempt(ctx context.Context, i int, sel selected, attempt int) (res Result, inc string) {
	name := sel.name()
	start := time.Now()
	res = Result{Name: name, Driver: r.db.driver, Ops: r.cfg.Ops}
	skip := sel.sc.skip
	if sel.sc.skipVariant != nil {
		skip = func(r *runner) string { return sel.sc.skipVariant(r, sel.variant) }
	}
	if skip != nil {
		if why := skip(r); why != "" {
			res.Skipped, res.Reason, res.OK = true, why, true
			r.prog.skipped(i, name, why)
			return res, ""
		}
	}
	scope := r.scope(name)
	if attempt > 1 {
		scope += fmt.Sprintf("#%d", attempt)
	}
	t := &trial{
		r: r, name: name, variant: sel.variant, attempt: attempt, scope: scope,
		rng:       trialSeed(r.cfg.Seed, name),
		lease:     r.cfg.Lease,
		deadline:  2*time.Minute + time.Duration(r.cfg.Ops)*20*time.Millisecond,
		h:         newHistory(),
		ledgerKey: func(op string) string { return op },
	}
	for k := range r.cfg.Ops {
		t.keys = append(t.keys, fmt.Sprintf("op-%05d", k))
	}
	t.effects = func(ctx context.Context) (map[string][]string, error) {
		return localEffects(ctx, r.ledger.Driver().DB(), rebinder(r.ledger.Driver()), t.scope)
	}
	r.prog.begin(i, t)
	tctx, cancel := context.WithTimeout(ctx, t.deadline+time.Minute)
	err := sel.sc.run(tctx, t)
	cancel()
	var incErr inconclusive
	if errors.As(err, &incErr) {
		t.killAll()
		for _, f := range slices.Backward(t.after) {
			f()
		}
		res.Skipped, res.OK = true, true
		res.Seconds = time.Since(start).Seconds()
		return res, incErr.why
	}
	if err != nil {
		t.fail("%v", err)
	}
	t.killAll()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	res = t.check(cctx, res)
	cancel()
	for _, f := range slices.Backward(t.after) {
		f()
	}
	res.Seconds = time.Since(start).Seconds()
	t.writeHistory()
	r.prog.end(i, res)
	return res, ""
}

// inconclusive, returned by a scenario, ends its trial as skipped with its
// reason: the attack could not run as designed for a fault outside idem
// (a broker that lost its queue and the messages in it), so the counts
// could say nothing either way.
type inconclusive struct{ why string }

func (e inconclusive) Error() string { return e.why }

// fail records a failure of the scenario (beyond what the counters show).
func (t *trial) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures = append(t.failures, fmt.Sprintf(format, args...))
}

// note records something worth knowing that is not a failure.
func (t *trial) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// record adds e to the history; a malformed history fails the scenario.
func (t *trial) record(e Event) {
	if err := t.h.add(e); err != nil {
		t.fail("%v", err)
	}
}

func (t *trial) track(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.procs = append(t.procs, p)
}

// killAll kills every worker still running and waits for it.
func (t *trial) killAll() {
	t.mu.Lock()
	procs := slices.Clone(t.procs)
	t.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			p.kill()
			<-p.done
		}
	}
}

// job is one worker to run: its spec and its armed crash points.
type job struct {
	s     spec
	crash string
}

// runAll runs the jobs, at most Workers at a time, and waits for all. A
// worker killed by its armed crash point is expected; any other failure
// is an error.
func (t *trial) runAll(ctx context.Context, jobs []job) error {
	sem := make(chan struct{}, t.r.cfg.Workers)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			p, err := t.start(ctx, j.s, j.crash)
			if err == nil {
				err = p.wait(ctx, j.crash != "")
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// split hands keys to Workers workers of spec s, in contiguous chunks.
func (t *trial) split(s spec, keys []string) []job {
	n := min(t.r.cfg.Workers, len(keys))
	var jobs []job
	for i := range n {
		c := s
		c.Keys = keys[i*len(keys)/n : (i+1)*len(keys)/n]
		jobs = append(jobs, job{s: c})
	}
	return jobs
}

// shuffled returns the keys in a random order (from the trial's seed).
func (t *trial) shuffled() []string {
	k := slices.Clone(t.keys)
	t.rngMu.Lock()
	defer t.rngMu.Unlock()
	t.rng.Shuffle(len(k), func(i, j int) { k[i], k[j] = k[j], k[i] })
	return k
}

// intN draws from the trial's seeded stream: [0, n).
func (t *trial) intN(n int) int {
	t.rngMu.Lock()
	defer t.rngMu.Unlock()
	return t.rng.IntN(n)
}

// unsettled returns the keys that have had no OK yet.
func (t *trial) unsettled() []string {
	var out []string
	for _, k := range t.keys {
		if !t.h.isSettled(k) {
			out = append(out, k)
		}
	}
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// writeHistory appends the trial's history to Config.History.
func (t *trial) writeHistory() {
	w := t.r.cfg.History
	if w == nil {
		return
	}
	enc := json.NewEncoder(w)
	for _, e := range t.h.snapshot() {
		enc.Encode(struct {
			Scenario string `json:"scenario"`
			Event
		}{t.name, e})
	}
}
