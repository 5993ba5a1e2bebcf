package jobs

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// maxFinishBatch bounds one group commit.
const maxFinishBatch = 256

// finisher writes the client's own ends of claims (completions, retries,
// dead letters, releases) in batches: one transaction for whatever has
// queued up while the previous batch was being written, with no waiting
// window beyond one yield of the processor unless a claim is on its way
// (see awaitClaim). Each write in a batch is fenced
// on its own. CompleteTx does not come here: it belongs to the handler's
// transaction.
//
// Where the driver can (driver.JobFinishClaimer), a producer's claim rides
// in a batch too: the batch's ends and the claim commit together, and the
// claim takes the slots of the producer's jobs that the batch ends. A
// worker that runs short jobs then commits about once per claim, as a
// hand-written loop that claims a batch and completes it in one statement
// does.
type finisher struct {
	drv     driver.Driver
	claimer driver.JobFinishClaimer // nil: claims go alone
	// cooldown is Config.FetchCooldown: the longest a batch of ends waits
	// for a claim that is on its way (see run).
	cooldown time.Duration
	reqs     chan finishReq // unbuffered: a request is either taken or not sent
	claims   chan *claimReq // unbuffered, as reqs

	once sync.Once
	stop chan struct{} // closed: no more batches; callers write alone
	done chan struct{}
}

type finishReq struct {
	ctx   context.Context
	p     driver.FinishJobParams
	from  *producer  // whose slot the end frees
	ex    *execution // whose end it is
	reply chan error
}

// received tells r's producer that the finisher has r (see
// producer.unsent).
func (r finishReq) received() finishReq {
	if r.from != nil {
		r.from.delivered(r.ex)
	}
	return r
}

// short reports whether r ends a job whose work ran for less than d.
func (r finishReq) short(d time.Duration) bool {
	return r.ex != nil && r.ex.runTime() < d
}

// claimReq is a producer's claim handed to the finisher. Its Limit is set
// when the batch is written: the producer's free slots then, plus the
// slots of its jobs that the batch ends.
type claimReq struct {
	ctx   context.Context
	from  *producer
	p     driver.ClaimJobsParams
	rows  []idemtype.JobRow
	err   error
	none  bool          // no slot was free: nothing was claimed, try again
	reply chan struct{} // closed when rows, err and none are set
}

func newFinisher(drv driver.Driver, cooldown time.Duration) *finisher {
	f := &finisher{drv: drv, cooldown: cooldown, reqs: make(chan finishReq), claims: make(chan *claimReq), stop: make(chan struct{}), done: make(chan struct{})}
	f.claimer, _ = drv.(driver.JobFinishClaimer)
	go f.run()
	return f
}

// finish ends one claim: ErrFenced if it was no longer held. The write is
// bounded by finishTimeout, as well as by ctx.
func (f *finisher) finish(ctx context.Context, ex *execution, p driver.FinishJobParams) error {
	req := finishReq{ctx: ctx, p: p, from: ex.p, ex: ex, reply: make(chan error, 1)}
	select {
	case f.reqs <- req:
		return <-req.reply
	case <-f.stop:
		ctx, cancel := context.WithTimeout(ctx, finishTimeout)
		defer cancel()
		return f.drv.FinishJob(ctx, driver.Shared, p)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claim makes from's claim p in the next batch (p.Limit is set there). none
// reports that no slot was free by then, so nothing was claimed. Callers
// check f.claimer first.
func (f *finisher) claim(ctx context.Context, from *producer, p driver.ClaimJobsParams) (rows []idemtype.JobRow, none bool, err error) {
	req := &claimReq{ctx: ctx, from: from, p: p, reply: make(chan struct{})}
	select {
	case f.claims <- req:
		<-req.reply
		return req.rows, req.none, req.err
	case <-f.stop:
		p.Limit = from.free()
		if p.Limit <= 0 {
			return nil, true, nil
		}
		rows, err := f.drv.ClaimJobs(ctx, p)
		return rows, false, err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

func (f *finisher) close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

func (f *finisher) run() {
	defer close(f.done)
	for {
		var (
			batch []finishReq
			claim *claimReq
		)
		claims := f.claims
		select {
		case <-f.stop:
			return
		case r := <-f.reqs:
			r = r.received()
			batch = append(batch, r)
		case claim = <-claims:
			claims = nil // one claim a batch
		}
		// Gather what is queued; when nothing is, yield once so that the
		// other jobs of the same claim, whose work returned together with
		// this one's, join the batch rather than wait for the next commit.
		yielded := false
	gather:
		for len(batch) < maxFinishBatch {
			select {
			case r := <-f.reqs:
				r = r.received()
				batch = append(batch, r)
				yielded = false
			case claim = <-claims:
				claims = nil
				yielded = false
			default:
				if yielded {
					break gather
				}
				yielded = true
				runtime.Gosched()
			}
		}
		if claim == nil && f.claimer != nil && claimComing(batch) {
			claim, batch = f.awaitClaim(batch)
		}
		if claim != nil {
			batch = f.awaitEnds(batch, claim.from)
			f.writeWithClaim(batch, claim)
			continue
		}
		f.write(batch)
	}
}

// awaitEnds gathers, for a claim of from, the ends of from's jobs that are
// on their way, so that the claim takes their slots in the same commit
// rather than in the next: those whose work has returned but which have
// not reached the finisher yet (producer.unsent), and, once the batch ends
// one of from's jobs and while every end in it ran for less than the fetch
// cooldown, also those still working. Jobs that short end in bursts, a
// claim's worth at a time: the rest of the burst is about to end, and a
// claim that waits for it takes all its slots at once, as a loop that
// claims a batch and completes it does. Longer jobs end one by one, and
// their ends do not wait for each other. It waits at most the fetch
// cooldown.
func (f *finisher) awaitEnds(batch []finishReq, from *producer) []finishReq {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	short, own := true, false // every end ran less than the cooldown; one is from's
	note := func(r finishReq) {
		short, own = short && r.short(f.cooldown), own || r.from == from
	}
	for _, r := range batch {
		note(r)
	}
	for len(batch) < maxFinishBatch && from.endsToCome(short && own) > 0 {
		if timer == nil {
			timer = time.NewTimer(f.cooldown)
		}
		select {
		case r := <-f.reqs:
			r = r.received()
			batch = append(batch, r)
			note(r)
		case <-timer.C:
			return batch
		case <-f.stop:
			return batch
		}
	}
	return batch
}

// claimComing reports whether a producer whose job the batch ends is about
// to claim (producer.claiming): it claims within FetchCooldown of its last
// claim, sooner once enough slots are free, and the ends of its jobs are
// best written with that claim, in one commit, than in one of their own
// just before it.
func claimComing(batch []finishReq) bool {
	for _, r := range batch {
		if r.from != nil && r.from.claiming.Load() {
			return true
		}
	}
	return false
}

// awaitClaim waits for a claim to ride with batch, gathering the ends that
// come meanwhile, for at most the fetch cooldown (the claim it waits for
// comes sooner) or until the batch is full or the finisher stops.
func (f *finisher) awaitClaim(batch []finishReq) (*claimReq, []finishReq) {
	timer := time.NewTimer(f.cooldown)
	defer timer.Stop()
	for len(batch) < maxFinishBatch {
		select {
		case c := <-f.claims:
			return c, batch
		case r := <-f.reqs:
			r = r.received()
			batch = append(batch, r)
		case <-timer.C:
			return nil, batch
		case <-f.stop:
			return nil, batch
		}
	}
	return nil, batch
}

// writeWithClaim writes batch and claim in one transaction. Should that
// fail, the ends are written again alone (each is fenced: one that did
// commit is reported fenced) and the claim reports the error.
func (f *finisher) writeWithClaim(batch []finishReq, claim *claimReq) {
	defer close(claim.reply)
	limit := claim.from.free()
	for _, r := range batch {
		if r.from == claim.from {
			limit++
		}
	}
	if limit <= 0 {
		claim.none = true
		if len(batch) > 0 {
			f.write(batch)
		}
		return
	}
	claim.p.Limit = limit
	ps := make([]driver.FinishJobParams, len(batch))
	for i, r := range batch {
		ps[i] = r.p
	}
	fenced, rows, err := f.claimer.FinishAndClaimJobs(claim.ctx, ps, claim.p)
	if err != nil {
		claim.err = err
		if len(batch) > 0 {
			f.write(batch)
		}
		return
	}
	for i, r := range batch {
		if fenced[i] {
			r.reply <- driver.ErrFenced
		} else {
			r.reply <- nil
		}
	}
	claim.rows = rows
}

func (f *finisher) write(batch []finishReq) {
	// The first request's context bounds the write, and finishTimeout.
	ctx, cancel := context.WithTimeout(batch[0].ctx, finishTimeout)
	defer cancel()
	if len(batch) == 1 {
		batch[0].reply <- f.drv.FinishJob(ctx, driver.Shared, batch[0].p)
		return
	}
	ps := make([]driver.FinishJobParams, len(batch))
	for i, r := range batch {
		ps[i] = r.p
	}
	fenced, err := f.drv.FinishJobs(ctx, ps)
	for i, r := range batch {
		switch {
		case err != nil:
			r.reply <- err
		case fenced[i]:
			r.reply <- driver.ErrFenced
		default:
			r.reply <- nil
		}
	}
}
