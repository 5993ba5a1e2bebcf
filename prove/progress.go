package prove

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress shows live counters while scenarios run. On a terminal the
// running scenario's line is redrawn a few times a second; elsewhere one
// line is written per finished scenario. A nil writer shows nothing.
type progress struct {
	w     io.Writer
	live  bool
	total int

	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

func newProgress(w io.Writer, live bool, total int) *progress {
	return &progress{w: w, live: live && w != nil, total: total}
}

func (p *progress) prefix(i int, name string) string {
	return fmt.Sprintf("[%*d/%d] %-28s", len(fmt.Sprint(p.total)), i+1, p.total, name)
}

// begin starts showing t's counters.
func (p *progress) begin(i int, t *trial) {
	if !p.live {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func(stop, done chan struct{}) {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			attempts, settled, unknown := t.h.stats()
			fmt.Fprintf(p.w, "\r\033[K%s ops %d/%d  attempts %d  unknown %d  %.1fs",
				p.prefix(i, t.name), settled, len(t.keys), attempts, unknown, time.Since(start).Seconds())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}(p.stop, p.done)
}

// end stops the counters and writes the scenario's final line.
func (p *progress) end(i int, r Result) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop = nil
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %-4s %d ops  %d attempts  %d effects  %.1fs\n",
		p.prefix(i, r.Name), verdict(r), r.Ops, r.Attempts, r.Effects, r.Seconds)
}

// again says that a trial ended inconclusive and runs again.
func (p *progress) again(i int, name, why string) {
	p.line(i, name, "inconclusive: "+why+"; running it again")
}

// skipped writes a skipped trial's line.
func (p *progress) skipped(i int, name, why string) {
	p.line(i, name, "skipped: "+why)
}

// line stops the counters of a trial that began, if any, and writes what
// became of it.
func (p *progress) line(i int, name, what string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	if p.stop != nil { // a trial that began and ended inconclusive
		close(p.stop)
		<-p.done
		p.stop = nil
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %s\n", p.prefix(i, name), what)
}
