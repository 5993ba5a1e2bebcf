package jobs

import (
	"context"
	"time"

	"github.com/idemdev/idem/driver"
)

// finishAndClaim writes a batch of claim ends together with a claim of the
// slots they free, where the driver can do both in one commit
// (driver.JobFinishClaimer, PostgreSQL): a queue that is being drained then
// costs one commit per batch rather than a completion commit and a claim
// commit. It claims for the producer that holds most of the batch's jobs,
// as many jobs as that producer has free slots once the batch is written,
// and starts them before it answers the batch, so the claim never exceeds
// MaxWorkers: the jobs ending have returned from their work already. It
// reports false, writing nothing, when the driver cannot, the client is
// stopping, the queue has limits (their claims are serialized and counted
// apart), or the producer is claiming at that moment; the finisher then
// writes the batch alone.
func (c *Client) finishAndClaim(batch []finishReq) bool {
	fc, ok := c.drv.(driver.JobFinishClaimer)
	if !ok {
		return false
	}
	p := mostClaimed(batch)
	if p == nil || p.limits.Concurrency > 0 || p.limits.Rate > 0 {
		return false
	}
	// A claim started here counts as a fetcher: Stop waits for it before
	// it takes the set of running jobs as final, and none starts after
	// Stop.
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return false
	}
	c.fetchers.Add(1)
	c.mu.Unlock()
	defer c.fetchers.Done()
	if !p.claiming.TryLock() {
		return false
	}
	defer p.claiming.Unlock()

	ending := 0
	for _, r := range batch {
		if r.prod == p {
			ending++
		}
	}
	n := p.free() + ending
	if n <= 0 {
		return false
	}
	ps := make([]driver.FinishJobParams, len(batch))
	for i, r := range batch {
		ps[i] = r.p
	}
	// The batch's requests carry the same finish timeout; the first one's
	// context bounds the write, and the claim within it.
	ctx, cancel := context.WithTimeout(batch[0].ctx, claimTimeout)
	defer cancel()
	sent := time.Now()
	fenced, rows, err := fc.FinishAndClaimJobs(ctx, ps, p.claimParams(n))
	if err == nil {
		p.startAll(rows, sent)
	}
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
	return true
}

// mostClaimed returns the producer that claimed most of the batch's jobs.
func mostClaimed(batch []finishReq) *producer {
	var (
		best  *producer
		count = map[*producer]int{}
	)
	for _, r := range batch {
		if r.prod == nil {
			continue
		}
		count[r.prod]++
		if best == nil || count[r.prod] > count[best] {
			best = r.prod
		}
	}
	return best
}
