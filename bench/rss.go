package bench

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Process and machine statistics: peak memory, CPU time.

// resetPeakRSS returns freed memory to the system, so that what earlier
// rows left behind does not count, and restarts the kernel's peak-RSS count
// for this process (Linux: clear_refs 5); elsewhere it does nothing.
func resetPeakRSS() {
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is the process's peak resident set since the last reset, in MiB
// (Linux VmHWM); 0 where unknown.
func peakRSS() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
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
