package bench

import (
	"context"
	"errors"
	"math"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Stat is one measured side of a row.
type Stat struct {
	Ops      int64         // operations inside the windows (one across an edge counts in part)
	Elapsed  time.Duration // the windows, summed
	P50, P99 time.Duration // zero when latency was not measured
	// CPU is the process's CPU time (user+system) over the windows,
	// warm-ups included: with Ops it tells a side bound by the processor
	// from one bound by waiting (the disk, a lock).
	CPU time.Duration
	// Wall is the wall time over the same windows, warm-ups included.
	Wall time.Duration
	// busy and ticks are the whole machine's busy and total CPU ticks over
	// the windows: every core, every process (a database server's too).
	busy, ticks uint64

	h hist
}

// PerSec is the throughput over the window.
func (s Stat) PerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// CPUPerOp is the process's CPU time per operation, warm-ups included
// (an overestimate by their share).
func (s Stat) CPUPerOp() time.Duration {
	if s.Ops == 0 || s.Wall == 0 {
		return 0
	}
	// Scale to the counted window: the warm-up burned CPU too.
	return time.Duration(float64(s.CPU) * (float64(s.Elapsed) / float64(s.Wall)) / float64(s.Ops))
}

// MachineBusy is the share of the machine's CPU (all cores, all processes)
// that was busy while the side ran; 0 where unknown.
func (s Stat) MachineBusy() float64 {
	if s.ticks == 0 {
		return 0
	}
	return float64(s.busy) / float64(s.ticks)
}

// add merges another window of the same side into s.
func (s *Stat) add(o Stat) {
	s.Ops += o.Ops
	s.Elapsed += o.Elapsed
	s.CPU += o.CPU
	s.Wall += o.Wall
	s.busy += o.busy
	s.ticks += o.ticks
	s.h.merge(&o.h)
	s.P50, s.P99 = s.h.quantile(0.50), s.h.quantile(0.99)
}

// opFunc is one operation of a closed-loop load: worker w runs it again and
// again, seq counting its calls from 0. It returns how many items it
// handled (1 for most; a claim round of a job loop handles many), each
// counted as an operation that took the whole call.
type opFunc func(ctx context.Context, w int, seq int64) (items int, err error)

// one adapts a single-item operation.
func one(f func(ctx context.Context, w int, seq int64) error) opFunc {
	return func(ctx context.Context, w int, seq int64) (int, error) { return 1, f(ctx, w, seq) }
}

// warmup is the part of a run whose operations are not counted: pools fill,
// statement caches warm, batches reach their steady size.
func warmup(d time.Duration) time.Duration { return min(d/5, 500*time.Millisecond) }

// rounds is how many slices each side of an interleaved comparison runs:
// one per 250ms of the duration, at least 4. More turns spread a passing
// disturbance (a slow fsync on a shared disk, another process's burst)
// more evenly over the sides.
func rounds(d time.Duration) int { return max(4, int(d/(250*time.Millisecond))) }

// side is one contestant of a comparison. before and after, when set, run
// around each of its slices, outside the measurement.
type side struct {
	name          string // labels the side's goroutines in a CPU profile ("side")
	op            opFunc
	before, after func()
}

// compare measures the sides in turns, on the same machine at the same
// time: each runs rounds(d) slices, in the order A B, B A, A B, …,
// so that a change in the machine's background load (other processes, the
// disk's own cache) falls on every side alike. The first slice of each side
// starts with a warm-up that is not counted; later slices with a short
// one, for the loops to settle.
func compare(ctx context.Context, c int, d time.Duration, sides ...side) ([]Stat, error) {
	out := make([]Stat, len(sides))
	n := rounds(d)
	slice := d / time.Duration(n)
	for r := range n {
		for k := range sides {
			i := k
			if r%2 == 1 {
				i = len(sides) - 1 - k
			}
			warm := min(slice/10, 50*time.Millisecond)
			if r == 0 {
				warm = warmup(d)
			}
			s := sides[i]
			if s.before != nil {
				s.before()
			}
			var (
				st  Stat
				err error
			)
			pprof.Do(ctx, pprof.Labels("side", s.name), func(ctx context.Context) {
				st, err = closedLoop(ctx, c, warm, slice, s.op)
			})
			if s.after != nil {
				s.after()
			}
			if err != nil {
				return nil, err
			}
			out[i].add(st)
		}
	}
	return out, nil
}

// errDrained, returned by an operation, says there is no more work (the
// queue it works ran dry): its worker stops, and the window ends with the
// last operation counted.
var errDrained = errors.New("drained")

// closedLoop runs op from c workers for warm+d and measures the operations
// inside the last d. An operation that overlaps the window only in part
// counts for the share of its time inside it, so that operations as long
// as a slice (a hundred inserts in one transaction at 32 callers, a wave
// of 1 MiB responses) are counted at their rate instead of not at all;
// in a steady state that is the rate of completions. Latencies are those
// of every operation that overlaps the window. The first error stops the
// run and is returned: a benchmark that fails must not print a number.
func closedLoop(ctx context.Context, c int, warm, d time.Duration, op opFunc) (Stat, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0, wall0 := processCPU(), time.Now()
	busy0, ticks0 := machineCPU()
	from := wall0.Add(warm)
	until := from.Add(d)
	// counted is one worker's share of the window: the latencies of its
	// operations, how many it finished there (in part, for one that
	// overlaps an edge), and when its last one ended (no later than until),
	// as an offset from the window's start.
	type counted struct {
		h       hist
		ops     float64
		lastEnd time.Duration // from the window's start
	}
	workers := make([]counted, c)
	var (
		wg      sync.WaitGroup
		drained atomic.Bool
		fail    atomic.Pointer[error]
	)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := &workers[w]
			for seq := int64(0); ; seq++ {
				t0 := time.Now()
				if !t0.Before(until) || ctx.Err() != nil {
					return
				}
				n, err := op(ctx, w, seq)
				if errors.Is(err, errDrained) {
					drained.Store(true)
					return
				}
				if err != nil {
					if fail.CompareAndSwap(nil, &err) {
						cancel(err)
					}
					return
				}
				t1 := time.Now()
				if n == 0 || !t1.After(from) || !t0.Before(until) {
					continue
				}
				// The operation's span and its part inside the window, as
				// offsets from the window's start.
				start, end := t0.Sub(from), t1.Sub(from)
				lo, hi := max(start, 0), min(end, d)
				share := 1.0
				if took := end - start; took > 0 && hi-lo < took {
					share = float64(hi-lo) / float64(took)
				}
				me.h.addN(t1.Sub(t0), n)
				me.ops += share * float64(n)
				me.lastEnd = max(me.lastEnd, hi)
			}
		}()
	}
	wg.Wait()
	if p := fail.Load(); p != nil {
		return Stat{}, *p
	}
	if err := ctx.Err(); err != nil {
		return Stat{}, err
	}
	busy1, ticks1 := machineCPU()
	var (
		ops     float64
		lastEnd time.Duration
	)
	st := Stat{Elapsed: d, CPU: processCPU() - cpu0, Wall: time.Since(wall0), busy: busy1 - busy0, ticks: ticks1 - ticks0}
	for i := range workers {
		st.h.merge(&workers[i].h)
		ops += workers[i].ops
		lastEnd = max(lastEnd, workers[i].lastEnd)
	}
	st.Ops = int64(math.Round(ops))
	st.P50, st.P99 = st.h.quantile(0.50), st.h.quantile(0.99)
	if drained.Load() {
		if st.Ops == 0 {
			return Stat{}, errors.New("the work ran out during the warm-up: nothing was measured")
		}
		st.Elapsed = lastEnd
	}
	return st, nil
}

// hist is a latency histogram with buckets 2% wide from 1µs to about 3
// minutes: constant memory however long a run is.
type hist struct {
	n       int64
	buckets [histBuckets]int64
}

const (
	histGrowth  = 1.02
	histBuckets = 970 // 1µs × 1.02^970 ≈ 2.2e8 µs
)

var logGrowth = math.Log(histGrowth)

// addN records n operations that each took d (a batch's jobs).
func (h *hist) addN(d time.Duration, n int) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/logGrowth)+1, histBuckets-1)
	}
	h.buckets[i] += int64(n)
	h.n += int64(n)
}

func (h *hist) merge(o *hist) {
	h.n += o.n
	for i, v := range o.buckets {
		h.buckets[i] += v
	}
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, v := range h.buckets {
		seen += v
		if seen >= rank {
			us := math.Pow(histGrowth, float64(i))
			return time.Duration(us * float64(time.Microsecond))
		}
	}
	return 0
}
