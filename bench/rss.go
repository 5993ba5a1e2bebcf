package bench

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Process and machine statistics: peak memory, CPU time.

// resetPeakRSS returns freed memory to the system, so that what earlier
// rows (or the other side of a row) left behind does not count, and
// restarts the kernel's peak-RSS count for this process.
func resetPeakRSS() {
	runtime.GC() // with FreeOSMemory's, two: sync.Pools are emptied too
	debug.FreeOSMemory()
	resetProcPeak("self")
}

// peakRSS is this process's peak resident set since the last reset, in
// MiB; 0 where unknown.
func peakRSS() float64 {
	_, peak := procMemory("self")
	return float64(peak) / (1 << 20)
}

// procMemory reads a process's resident set now and its peak since the
// last resetProcPeak (Linux /proc/PROC/status VmRSS and VmHWM), in bytes;
// zeros where unknown. proc is a pid, or "self".
func procMemory(proc string) (rss, peak uint64) {
	f, err := os.Open("/proc/" + proc + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			continue
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak
}

// resetProcPeak restarts the kernel's peak-RSS count of a process (a pid,
// or "self") from its resident set now (Linux: clear_refs 5); elsewhere
// it does nothing.
func resetProcPeak(proc string) {
	os.WriteFile("/proc/"+proc+"/clear_refs", []byte("5"), 0)
}

// procCPU is the CPU time (user and system) a process (a pid) has used
// (Linux /proc/PID/stat, at the usual 100 clock ticks a second); 0 where
// unknown.
func procCPU(proc string) time.Duration {
	b, err := os.ReadFile("/proc/" + proc + "/stat")
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(b), ") ") // after the command's name, which may hold spaces
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// machineCPU reads the machine's busy and total CPU time so far (Linux
// /proc/stat, all cores, in clock ticks); zeros elsewhere.
func machineCPU() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// memSampler watches the Go runtime's memory while a side runs: the peak
// of the heap's objects (live and not yet swept), of the collector's heap
// goal and of the memory Go has mapped and not returned, each sampled
// every few milliseconds. (The resident set's peak is the kernel's exact
// one: peakRSS.)
type memSampler struct {
	stop chan struct{}
	done chan struct{}
	peak memPeak
}

// memPeak is what a memSampler saw, with the resident set's peak, in
// bytes.
type memPeak struct {
	heap, goal, goMapped, rss uint64
	live, gcs                 uint64 // another process's: its live heap's peak, and how many collections it reported
}

func startMemSampler() *memSampler {
	s := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		samples := []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/gc/heap/goal:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
		}
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			p := &s.peak
			p.heap = max(p.heap, samples[0].Value.Uint64())
			p.goal = max(p.goal, samples[1].Value.Uint64())
			p.goMapped = max(p.goMapped, samples[2].Value.Uint64()-samples[3].Value.Uint64())
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the peaks.
func (s *memSampler) Stop() memPeak {
	close(s.stop)
	<-s.done
	return s.peak
}
