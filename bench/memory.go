package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Memory row: many guarded requests with large responses at once.
const (
	largeResponse = 1 << 20 // bytes: the gateway's default MaxResponse, stored whole
	largeInFlight = 100     // concurrent requests
	memorySlice   = 8 * time.Second
)

// scopeHeader is the request header the gateway process takes its scope
// from (`idem serve --scope-header`): on a database given by URL the row
// deletes what it wrote by that scope.
const scopeHeader = "X-Idem-Bench-Scope"

// memoryRows: largeInFlight connections of keyed POSTs whose answers are
// largeResponse bytes, through the gateway and through a bare
// httputil.ReverseProxy, each side's peak RSS next to the bytes in flight.
// The gateway must hold each answer whole (it is stored before it is
// sent); what it must not do is hold it twice.
//
// With Options.GatewayCommand the gateway is `idem serve` in a process of
// its own, as a user runs it, and its peak is that process's alone; the
// bare proxy, the upstream and the load generator stay in this process.
// Without it the gateway runs in this process too, and each side's peak
// is the whole process's.
func (r *runner) memoryRows(ctx context.Context) ([]Result, error) {
	return r.memoryRowsFor(ctx, max(r.o.Duration/2, memorySlice))
}

// memoryRowsFor is memoryRows with each side's slices of the given length.
func (r *runner) memoryRowsFor(ctx context.Context, slice time.Duration) (rows []Result, err error) {
	large := bytes.Repeat([]byte("x"), largeResponse)
	upstream, stop, err := serve("upstream", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(large)))
		w.WriteHeader(http.StatusCreated)
		w.Write(large)
	}))
	if err != nil {
		return nil, err
	}
	defer stop()
	u, _ := url.Parse(upstream)

	var sides [2]memSide
	if r.o.GatewayCommand == nil {
		idemOp, bare, stopSides, err := r.gatewaySides(ctx, u, largeInFlight)
		if err != nil {
			return nil, err
		}
		defer stopSides()
		sides = [2]memSide{{name: "idem", op: idemOp}, {name: "baseline", op: bare}}
	} else {
		var stopGateway func() error
		sides, stopGateway, err = r.gatewayProcSides(ctx, upstream, u)
		if err != nil {
			return nil, err
		}
		// Stopped (drained, or killed) and waited for on every way out; an
		// unclean stop is the row's error.
		defer func() {
			if serr := stopGateway(); serr != nil && err == nil {
				rows, err = nil, serr
			}
		}()
	}
	return r.memoryMeasure(ctx, slice, sides)
}

// gatewayProcSides starts the gateway as `idem serve` in a process of
// its own on a database of the run, and the bare proxy in this process,
// both in front of upstream. stop ends the load's connections, the
// process (reporting an unclean stop), the database and the bare proxy;
// on an error everything started is ended before it returns.
func (r *runner) gatewayProcSides(ctx context.Context, upstream string, u *url.URL) (sides [2]memSide, stop func() error, err error) {
	var stops []func()
	defer func() {
		if err != nil {
			for _, f := range slices.Backward(stops) {
				f()
			}
		}
	}()
	rp := bareProxy(u)
	bare, stopBare, err := r.httpLoad("baseline", rp, largeInFlight)
	if err != nil {
		return sides, nil, err
	}
	stops = append(stops, stopBare)
	// The bench opens (and migrates) the gateway's database first: on a
	// database given by URL, closing it deletes the scope's rows.
	var dbURL string
	_, scope, done, err := r.openLedgerURL(ctx, func(s string) string { dbURL = s; return s })
	if err != nil {
		return sides, nil, err
	}
	stops = append(stops, done)
	p, err := startGatewayProc(ctx, r.o.GatewayCommand, upstream, dbURL, "--scope-header", scopeHeader)
	if err != nil {
		return sides, nil, err
	}
	idemOp, closeIdle := keyedPOSTs(p.url, largeInFlight, http.Header{scopeHeader: {scope}})
	sides = [2]memSide{{name: "idem", op: idemOp, proc: p}, {name: "baseline", op: bare}}
	return sides, func() error {
		closeIdle()
		err := p.stop()
		done()
		stopBare()
		return err
	}, nil
}

// memoryMeasure runs the row Options.Runs times and returns the median
// run.
func (r *runner) memoryMeasure(ctx context.Context, slice time.Duration, sides [2]memSide) ([]Result, error) {
	var peaks []string
	row, err := r.medianRun(func(int) (Result, error) {
		where := "in this process"
		if sides[0].proc != nil {
			where = "idem serve in its own process"
		}
		r.progress("gateway 1 MiB responses, %d connections: idem gateway (%s), bare httputil.ReverseProxy", largeInFlight, where)
		res, err := memoryRun(ctx, r.db, slice, sides)
		peaks = append(peaks, fmt.Sprintf("%.0f", res.PeakRSSMegabytes))
		return res, err
	})
	if err != nil {
		return nil, err
	}
	if len(peaks) > 1 {
		row.Note = joinNote(row.Note, "the gateway's peak RSS in each run: "+strings.Join(peaks, ", ")+" MiB")
	}
	return []Result{row}, nil
}

// memSide is one side of the memory row: its operation, and the process
// it runs in (nil: this one).
type memSide struct {
	name string
	op   opFunc
	proc *gatewayProc
}

// memoryRun is one run of the memory row: each side two slices, A B then
// B A, long enough for many waves of 100 answers, so that what the
// collector leaves behind between waves shows, not only one wave's worth.
// Each run's peaks are its own.
func memoryRun(ctx context.Context, db *database, slice time.Duration, sides [2]memSide) (Result, error) {
	var (
		st    [2]Stat
		peaks [2]memPeak
		idle  [2]uint64     // resident set before the side's first slice (the gateway process: before any load)
		self  uint64        // this process's peak while a side in another process ran
		gwCPU time.Duration // the gateway process's CPU time while it was measured
	)
	for round := range 2 {
		for k := range 2 {
			i := k ^ round
			sd := sides[i]
			resetPeakRSS() // this process's peak starts again from its resident set now
			if sd.proc != nil {
				resetProcPeak(sd.proc.pid)
				sd.proc.gc.take()      // what earlier runs' collections saw
				idle[i] = sd.proc.idle // once it listened, before any run
			} else if idle[i] == 0 {
				idle[i] = uint64(peakRSS() * (1 << 20))
			}
			var (
				smp  *memSampler
				cpu0 time.Duration
			)
			if sd.proc == nil {
				smp = startMemSampler()
			} else {
				cpu0 = procCPU(sd.proc.pid)
			}
			var (
				s   Stat
				err error
			)
			pprof.Do(ctx, pprof.Labels("side", sd.name), func(ctx context.Context) {
				s, err = closedLoop(ctx, largeInFlight, warmup(slice), slice, sd.op)
			})
			q := &peaks[i]
			if smp != nil {
				p := smp.Stop()
				q.heap, q.goal, q.goMapped = max(q.heap, p.heap), max(q.goal, p.goal), max(q.goMapped, p.goMapped)
			}
			if sd.proc != nil {
				if aerr := sd.proc.alive(); aerr != nil {
					return Result{}, aerr
				}
				gwCPU += procCPU(sd.proc.pid) - cpu0 // warm-up included, as the Stat's
				_, peak := procMemory(sd.proc.pid)
				q.rss = max(q.rss, peak)
				start, live, goal, gcs := sd.proc.gc.take()
				q.heap, q.live, q.goal, q.gcs = max(q.heap, start<<20), max(q.live, live<<20), max(q.goal, goal<<20), q.gcs+gcs
				self = max(self, uint64(peakRSS()*(1<<20)))
			} else {
				q.rss = max(q.rss, uint64(peakRSS()*(1<<20)))
			}
			if err != nil {
				return Result{}, fmt.Errorf("1 MiB responses: %w", err)
			}
			st[i].add(s)
		}
	}
	res := newResult(GroupMemory, "gateway 1 MiB responses", "bare httputil.ReverseProxy, same upstream",
		db, largeInFlight, 2*slice, st[0], st[1], true)
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	res.PeakRSSMegabytes = mib(peaks[0].rss)
	inFlight := float64(largeInFlight*largeResponse) / (1 << 20)
	g, b := peaks[0], peaks[1]
	rise := func(peak, idle uint64) uint64 { return peak - min(peak, idle) }
	if p := sides[0].proc; p != nil {
		res.Note = fmt.Sprintf("gateway: idem serve in a process of its own (GOMEMLIMIT %s, GOGC %s), that process's peak RSS (VmHWM): %.0f MiB, %.2f× the %.0f MiB of responses in flight; %.0f MiB above its %.0f MiB idle, %.2f×; its CPU %.0f µs per operation; its Go heap (gctrace, %d collections): at most %.0f MiB when a collection started, %.0f MiB live after one, goal %.0f MiB; this process (load generator, upstream) meanwhile %.0f MiB; the cpu µs/op column is this process's alone. "+
			"Bare httputil.ReverseProxy in this process (with the load generator and upstream): peak RSS of the whole process %.0f MiB, %.0f MiB above %.0f MiB; Go heap peak %.0f MiB",
			envOf(p.cmd, "GOMEMLIMIT"), envOf(p.cmd, "GOGC"), mib(g.rss), mib(g.rss)/inFlight, inFlight, mib(rise(g.rss, idle[0])), mib(idle[0]), mib(rise(g.rss, idle[0]))/inFlight,
			float64(Stat{Ops: st[0].Ops, Elapsed: st[0].Elapsed, Wall: st[0].Wall, CPU: gwCPU}.CPUPerOp())/float64(time.Microsecond), g.gcs, mib(g.heap), mib(g.live), mib(g.goal), mib(self), mib(b.rss), mib(rise(b.rss, idle[1])), mib(idle[1]), mib(b.heap))
		return res, nil
	}
	limit := "off"
	if n := debug.SetMemoryLimit(-1); n < math.MaxInt64 {
		limit = fmt.Sprintf("%.0f MiB", mib(uint64(n)))
	}
	res.Note = fmt.Sprintf("Go memory limit (GOMEMLIMIT) %s; peak RSS of the whole bench process (gateway, load generator and upstream all in it) while each side ran: gateway %.0f MiB (%.2f× the %.0f MiB of responses in flight; %.0f MiB above the %.0f MiB resident before it, %.2f×; Go heap peak %.0f MiB, heap goal %.0f MiB, Go-mapped %.0f MiB), bare proxy %.0f MiB (%.0f MiB above %.0f MiB; Go heap peak %.0f MiB)",
		limit, mib(g.rss), mib(g.rss)/inFlight, inFlight, mib(rise(g.rss, idle[0])), mib(idle[0]), mib(rise(g.rss, idle[0]))/inFlight,
		mib(g.heap), mib(g.goal), mib(g.goMapped),
		mib(b.rss), mib(rise(b.rss, idle[1])), mib(idle[1]), mib(b.heap))
	return res, nil
}

// envOf is the value of an environment variable as cmd's process sees
// it, or "unset".
func envOf(cmd *exec.Cmd, key string) string {
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	v := "unset"
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
