package metrics

import (
	"sync"
	"time"
)

// The history keeps the last historyLen steps of historyStep each (15
// minutes), enough for a dashboard to show a recent trend without a
// Prometheus server.
const (
	historyStep = 5 * time.Second
	historyLen  = 180
)

// Sample counts what happened during one step of the history.
type Sample struct {
	At                  time.Time // start of the step
	DuplicatesPrevented int64
	Mismatches          int64
	Reclaims            int64
	ExpiredReplays      int64
	LeasesLost          int64
}

// history is a ring of per-step counts, filled as events happen: a step
// with no events is a zero, not a gap, and nothing needs a sampling
// goroutine.
type history struct {
	mu   sync.Mutex
	step time.Duration
	now  func() time.Time
	ring []slot
}

type slot struct {
	n int64 // step number (Unix time / step) the sample belongs to
	s Sample
}

func newHistory(step time.Duration, n int, now func() time.Time) *history {
	return &history{step: step, now: now, ring: make([]slot, n)}
}

func (h *history) stepOf(t time.Time) int64 { return t.UnixNano() / int64(h.step) }

func (h *history) add(f func(*Sample)) {
	n := h.stepOf(h.now())
	h.mu.Lock()
	sl := &h.ring[n%int64(len(h.ring))]
	if sl.n != n {
		*sl = slot{n: n, s: Sample{At: time.Unix(0, n*int64(h.step))}}
	}
	f(&sl.s)
	h.mu.Unlock()
}

// samples returns one Sample per step, oldest first, ending with the
// current step.
func (h *history) samples() []Sample {
	cur := h.stepOf(h.now())
	out := make([]Sample, len(h.ring))
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range out {
		n := cur - int64(len(h.ring)) + 1 + int64(i)
		sl := h.ring[((n%int64(len(h.ring)))+int64(len(h.ring)))%int64(len(h.ring))]
		if sl.n == n {
			out[i] = sl.s
		} else {
			out[i] = Sample{At: time.Unix(0, n*int64(h.step))}
		}
	}
	return out
}

// History returns the recent per-step counts (5 s steps over the last 15
// minutes), oldest first, ending with the step now in progress.
func (c *Collector) History() []Sample { return c.history.samples() }

// HistoryStep is the width of one History sample.
func (c *Collector) HistoryStep() time.Duration { return c.history.step }
