package jobs

import (
	"testing"
	"time"
)

// runningJobs starts n executions on p whose work ran for ran, as
// producer.start counts them, without a client.
func runningJobs(p *producer, n int, ran time.Duration) []*execution {
	exs := make([]*execution, n)
	for i := range exs {
		exs[i] = &execution{p: p, started: time.Now()}
		exs[i].ran.Store(int64(ran))
		p.running++
	}
	return exs
}

// The ends of a burst of short jobs wait for the rest of the burst, still
// working when the claim came, so that the claim takes all their slots;
// the ends of longer jobs, and a claim whose batch ends none of the
// producer's jobs, do not wait for jobs still working. The cooldown is an
// hour: a wait that ends does so because the ends came, never by the timer.
func TestAwaitEnds(t *testing.T) {
	newFinisher := func() *finisher {
		return &finisher{cooldown: time.Hour, reqs: make(chan finishReq), stop: make(chan struct{})}
	}
	t.Run("short jobs: the rest of the burst", func(t *testing.T) {
		f, p := newFinisher(), &producer{}
		exs := runningJobs(p, 3, time.Microsecond)
		p.ending(exs[0])
		first := finishReq{from: p, ex: exs[0]}.received()
		go func() {
			for _, ex := range exs[1:] {
				p.ending(ex)
				f.reqs <- finishReq{from: p, ex: ex}
			}
		}()
		if batch := f.awaitEnds([]finishReq{first}, p); len(batch) != 3 {
			t.Fatalf("batch of %d ends, want all 3 of the burst", len(batch))
		}
		if n := p.endsToCome(true); n != 0 {
			t.Fatalf("%d ends still to come", n)
		}
	})
	t.Run("long jobs: only the ends on their way", func(t *testing.T) {
		f, p := newFinisher(), &producer{}
		exs := runningJobs(p, 3, 2*time.Hour)
		p.ending(exs[0])
		first := finishReq{from: p, ex: exs[0]}.received()
		if batch := f.awaitEnds([]finishReq{first}, p); len(batch) != 1 {
			t.Fatalf("batch of %d ends, want 1", len(batch))
		}
	})
	t.Run("no end of the producer's: no wait for its jobs", func(t *testing.T) {
		f, p, other := newFinisher(), &producer{}, &producer{}
		runningJobs(p, 2, time.Microsecond)
		exs := runningJobs(other, 1, time.Microsecond)
		other.ending(exs[0])
		first := finishReq{from: other, ex: exs[0]}.received()
		if batch := f.awaitEnds([]finishReq{first}, p); len(batch) != 1 {
			t.Fatalf("batch of %d ends, want 1", len(batch))
		}
		if batch := f.awaitEnds(nil, p); len(batch) != 0 {
			t.Fatalf("batch of %d ends, want none", len(batch))
		}
	})
}
