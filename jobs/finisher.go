package jobs

import (
	"context"
	"runtime"
	"sync"

	"github.com/idemdev/idem/driver"
)

// maxFinishBatch bounds one group commit.
const maxFinishBatch = 256

// finisher writes the client's own ends of claims (completions, retries,
// dead letters, releases) in batches: one transaction for whatever has
// queued up while the previous batch was being written, with no waiting
// window beyond one yield of the processor. Each write in a batch is fenced on its own. CompleteTx does not
// come here: it belongs to the handler's transaction.
type finisher struct {
	drv  driver.Driver
	reqs chan finishReq // unbuffered: a request is either taken or not sent
	// along, when set, may write a batch itself, with a claim (see
	// Client.finishAndClaim); it reports whether it did.
	along func([]finishReq) bool

	once sync.Once
	stop chan struct{} // closed: no more batches; callers write alone
	done chan struct{}
}

type finishReq struct {
	ctx   context.Context
	prod  *producer // the producer that claimed the job
	p     driver.FinishJobParams
	reply chan error
}

func newFinisher(drv driver.Driver, along func([]finishReq) bool) *finisher {
	f := &finisher{drv: drv, along: along, reqs: make(chan finishReq), stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

// finish ends one claim: ErrFenced if it was no longer held.
func (f *finisher) finish(ctx context.Context, prod *producer, p driver.FinishJobParams) error {
	req := finishReq{ctx: ctx, prod: prod, p: p, reply: make(chan error, 1)}
	select {
	case f.reqs <- req:
		return <-req.reply
	case <-f.stop:
		return f.drv.FinishJob(ctx, driver.Shared, p)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *finisher) close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

func (f *finisher) run() {
	defer close(f.done)
	for {
		var batch []finishReq
		select {
		case <-f.stop:
			return
		case r := <-f.reqs:
			batch = append(batch, r)
		}
		// Gather what is queued; when nothing is, yield once so that the
		// other jobs of the same claim, whose work returned together with
		// this one's, join the batch rather than wait for the next commit.
		yielded := false
	gather:
		for len(batch) < maxFinishBatch {
			select {
			case r := <-f.reqs:
				batch = append(batch, r)
				yielded = false
			default:
				if yielded {
					break gather
				}
				yielded = true
				runtime.Gosched()
			}
		}
		f.write(batch)
	}
}

func (f *finisher) write(batch []finishReq) {
	if f.along != nil && f.along(batch) {
		return
	}
	if len(batch) == 1 {
		batch[0].reply <- f.drv.FinishJob(batch[0].ctx, driver.Shared, batch[0].p)
		return
	}
	ps := make([]driver.FinishJobParams, len(batch))
	for i, r := range batch {
		ps[i] = r.p
	}
	// The batch's requests carry the same finish timeout; the first one's
	// context bounds the write.
	fenced, err := f.drv.FinishJobs(batch[0].ctx, ps)
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
