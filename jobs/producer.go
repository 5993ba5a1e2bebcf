package jobs

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
)

// producer claims one queue's jobs for this client and runs them on worker
// goroutines, at most max at a time.
type producer struct {
	c      *Client
	queue  string
	max    int
	limits Limits

	mu      sync.Mutex
	running int
	// finishing counts the running jobs whose work has returned and whose
	// final write (a completion, mostly) is on its way: their slots free
	// within one commit, and a claim waits for them rather than take the
	// slots freed so far (see waitForSlots).
	finishing int
	// unsent counts the finishing jobs whose end the finisher has not
	// received yet (nor ever will: until their executor is done), so that
	// a claim can wait for the ends on their way (finisher.awaitEnds).
	unsent int

	// claiming is set while the fetch loop is on its way to its next claim
	// in the finisher's batch (waiting for slots, or claiming): not idle,
	// not sleeping after an error. The finisher then holds the ends of
	// this producer's jobs for that claim (see finisher.awaitClaim).
	claiming atomic.Bool

	wake  chan struct{} // new jobs may be due: a notice, or a local enqueue
	freed chan struct{} // a running job finished

	// Claimed jobs go to idle worker goroutines, which stay for the next
	// job rather than end with this one (a new goroutine per job pays for
	// its stack to grow again each time); a job no idle worker takes
	// starts a new one. Workers end once the fetch loop has ended.
	work chan *execution // unbuffered: taken by an idle worker or not at all
	quit chan struct{}   // closed when the fetch loop has ended
}

// rescueLimit bounds how many expired jobs one claim hands back.
const rescueLimit = 100

// claimTimeout bounds one claim: a claim is never cancelled by Stop (a
// claim whose answer is lost leaves jobs running until their leases end).
const claimTimeout = 30 * time.Second

func newProducer(c *Client, queue string, max int) *producer {
	return &producer{c: c, queue: queue, max: max, limits: c.cfg.Queues[queue].Limits, wake: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		work: make(chan *execution), quit: make(chan struct{})}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *producer) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max - p.running
}

// slots returns the free slots and the slots about to free.
func (p *producer) slots() (free, finishing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max - p.running, p.finishing
}

// endsToCome counts the ends the finisher does not have yet: those of the
// jobs whose work has returned (unsent) and, with working, also those of
// the jobs still working.
func (p *producer) endsToCome(working bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if working {
		return p.unsent + p.running - p.finishing
	}
	return p.unsent
}

// delivered records that the finisher has ex's end.
func (p *producer) delivered(ex *execution) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ex.delivered {
		ex.delivered = true
		if ex.finishing {
			p.unsent--
		}
	}
}

// ending counts ex as finishing: its work returned.
func (p *producer) ending(ex *execution) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ex.finishing {
		ex.finishing = true
		p.finishing++
		if !ex.delivered {
			p.unsent++
		}
	}
	signal(p.freed) // a claim that rides with the ends may take its slot
}

// run is the fetch loop: claim as many due jobs as there are free slots;
// when the queue runs dry, wait for a wake-up or the next poll. An idle
// queue polls with backoff from the fetch cooldown up to PollInterval, or
// at PollInterval while LISTEN is up. While jobs keep coming, a claim waits
// (up to FetchCooldown after the previous one) until a quarter of the slots
// are free, so that claims come in batches rather than one per finished
// job.
func (p *producer) run(stop <-chan struct{}) {
	defer close(p.quit)
	cfg := p.c.cfg
	idle := cfg.FetchCooldown
	batch := (p.max + 3) / 4
	// With a driver that claims in the finisher's transaction, the slots of
	// finishing jobs count as free: their ends and the claim commit
	// together.
	together := p.c.finisher.claimer != nil
	var last time.Time
	defer p.claiming.Store(false)
	for {
		p.claiming.Store(together)
		if !p.waitForSlots(stop, batch, last.Add(cfg.FetchCooldown), together) {
			return
		}
		sent := time.Now()
		last = sent
		var (
			rows []idemtype.JobRow
			err  error
		)
		if together {
			var none bool
			rows, none, err = p.claimWithEnds()
			if none && err == nil { // the finishing jobs ended elsewhere (CompleteTx)
				select {
				case <-stop:
					return
				case <-p.freed:
				}
				continue
			}
		} else {
			rows, err = p.claim(p.free())
		}
		if err != nil {
			p.claiming.Store(false)
			p.c.log.LogAttrs(context.Background(), slog.LevelError, "claim failed", slog.String("queue", p.queue), slog.String("error", err.Error()))
			if !sleep(stop, cfg.PollInterval) {
				return
			}
			continue
		}
		for _, r := range rows {
			crashpoint.Hit(crashpoint.JobAfterClaim)
			p.start(r, sent)
		}
		if len(rows) > 0 {
			idle = cfg.FetchCooldown
			continue
		}
		p.claiming.Store(false)
		timer := time.NewTimer(idle + rand.N(idle/8+1))
		select {
		case <-stop:
			timer.Stop()
			return
		case <-p.wake:
			idle = cfg.FetchCooldown
		case <-timer.C:
			idle = min(max(idle*2, time.Millisecond), cfg.PollInterval)
			if p.c.listening.Load() {
				idle = cfg.PollInterval
			}
		}
		timer.Stop()
	}
}

// waitForSlots waits until at least one slot is free, and then until want
// are or the deadline passes. While jobs whose work has returned are
// being finished it also waits for those (their write is one group commit
// away), unless half the slots are free already: so that a claim takes the
// slots a whole completion batch frees, not the few freed first, and
// claims and completions do not split into ever smaller batches. With
// together (the claim rides in the finisher's batch) a finishing job's
// slot counts as free already. It reports false if stop closed.
func (p *producer) waitForSlots(stop <-chan struct{}, want int, deadline time.Time, together bool) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		free, finishing := p.slots()
		ready := free >= max(want, (p.max+1)/2) || free > 0 && finishing == 0 && (free >= want || !time.Now().Before(deadline))
		timed := free > 0 && finishing == 0 // a finishing job signals freed when it is done
		if together {
			avail := free + finishing
			ready = avail >= want || avail > 0 && !time.Now().Before(deadline)
			timed = avail > 0
		}
		if ready {
			select {
			case <-stop:
				return false
			default:
				return true
			}
		}
		var expired <-chan time.Time
		if timed {
			timer = time.NewTimer(time.Until(deadline))
			expired = timer.C
		}
		select {
		case <-stop:
			return false
		case <-p.freed:
		case <-expired:
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
}

func (p *producer) claim(n int) ([]idemtype.JobRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	params := p.claimParams()
	params.Limit = n
	return p.c.drv.ClaimJobs(ctx, params)
}

// claimWithEnds claims in the finisher's next batch, as many jobs as there
// are free slots once the batch's ends are counted. none reports that no
// slot was free.
func (p *producer) claimWithEnds() (rows []idemtype.JobRow, none bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	return p.c.finisher.claim(ctx, p, p.claimParams())
}

// claimParams is the producer's claim, but for its Limit.
func (p *producer) claimParams() driver.ClaimJobsParams {
	return driver.ClaimJobsParams{
		Queue: p.queue, Worker: p.c.cfg.ID, LeaseID: rand.Int64(), Lease: p.c.cfg.Lease, RescueLimit: rescueLimit,
		Concurrency: p.limits.Concurrency, PerPartition: p.limits.PerPartition, Rate: p.limits.Rate, RateInterval: p.limits.RateInterval,
	}
}

func (p *producer) start(r idemtype.JobRow, sent time.Time) {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
	ex := &execution{c: p.c, p: p, row: r, fence: driver.JobFence{ID: r.ID, Attempt: r.Attempt, LeaseID: r.LeaseID}, claimSent: sent, started: time.Now()}
	ex.rec = &ex.row
	m := p.c.cfg.Metrics
	if rescued(ex.rec) {
		m.JobTransition(p.queue, TransitionRunning, TransitionRescued)
	}
	m.JobTransition(p.queue, TransitionAvailable, TransitionRunning)
	p.c.track(ex)
	p.c.execs.Add(1)
	select {
	case p.work <- ex:
	default:
		go p.worker(ex)
	}
}

// worker runs ex, then the jobs it is handed while idle, until the fetch
// loop ends.
func (p *producer) worker(ex *execution) {
	for {
		p.execute(ex)
		select {
		case ex = <-p.work:
		case <-p.quit:
			return
		}
	}
}

func (p *producer) execute(ex *execution) {
	defer p.c.execs.Done()
	defer p.done(ex)
	ex.execute()
}

func (p *producer) done(ex *execution) {
	p.c.untrack(ex)
	p.mu.Lock()
	p.running--
	if ex.finishing {
		p.finishing--
		if !ex.delivered {
			p.unsent-- // ended without the finisher: CompleteTx, a cancel
		}
	}
	ex.delivered = true
	p.mu.Unlock()
	signal(p.freed)
}
