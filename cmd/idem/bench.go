package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/bench"
)

const benchUsage = "idem bench [--db URL] [--duration D] [--concurrency 1,8,32] [--rows LIST] [--keys N] [--runs N] [--cycle-pause D] [--json] [--out FILE] [--cpuprofile FILE]"

func init() {
	register(command{
		name:    "bench",
		usage:   benchUsage,
		summary: "measure idem against hand-written SQL and a bare reverse proxy",
		run:     runBench,
	})
}

func runBench(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", benchUsage, stderr)
	setUsage(fs, benchUsage, `
Runs, in one process, each idem path next to its baseline on the same
database with the same durability settings, and prints ops/s, p50 and p99
latency and the ratio idem/baseline:

  ledger       claim+complete vs the same two statements written by hand
  groupcommit  the ledger with group commit vs one commit per write
  jobs         enqueue, bulk insert, and claim+complete, vs hand-written SQL loops
               (FOR UPDATE SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE on SQLite)
  gateway      keyed POSTs through idem's gateway vs a bare
               httputil.ReverseProxy, in front of the same loopback upstream
  sqlite       the ledger on modernc.org/sqlite (pure Go) vs mattn/go-sqlite3
               (cgo); SQLite in a cgo build only
  scale        (only when asked for) claim+complete and replays on a ledger
               filled with --keys records vs an empty one; bytes per key;
               prune throughput, and claim+complete while a prune runs vs
               without; needs --db sqlite or --db postgres
  cycles       (only when asked for) fills a ledger with --keys records and
               prunes all of them, three times: the ledger's size after each
               fill and prune, each prune's rate vs the first's
  memory       (only when asked for) 100 keyed POSTs at once whose answers
               are 1 MiB each, through the gateway (idem serve, started as
               a process of its own on the same database) vs a bare
               ReverseProxy in this process: the gateway process's peak RSS
               next to the 100 MiB in flight

--db sqlite (the default) measures a new file in a temporary directory
(synchronous=FULL); --db postgres starts a throwaway PostgreSQL cluster from
the system's binaries with fsync on. A URL measures that database: the rows
the run writes are deleted afterwards, but never point it at production.
It does not read $IDEM_DB. The sides of a row take turns in four slices
each, so that background load falls on both alike; each side runs for
--duration in all, after a short warm-up. With the defaults a run takes
about two minutes. The cpu µs/op columns are this process's CPU time per
operation (load generator included; a PostgreSQL server's is not).
--runs N measures every row N times, one run after the other on the same
databases (scale: on one fill), and prints the run whose ratio is the
median, with the range of the ratios; the cycles rows run once.
See docs/performance.md.`)
	db := fs.String("db", "sqlite", "`URL`: sqlite (a temporary file), postgres (a throwaway cluster), or a URL (sqlite:PATH, postgres://…, host=… dbname=…) to measure")
	dur := fs.Duration("duration", bench.DefaultDuration, "how long each side of each row is measured")
	conc := fs.String("concurrency", "1,8,32", "comma-separated numbers of concurrent callers")
	rows := fs.String("rows", strings.Join(bench.DefaultGroups, ","), "comma-separated row groups to run (known: "+strings.Join(bench.Groups, ", ")+")")
	keys := fs.Int("keys", bench.DefaultKeys, "how many completed records the scale rows fill the ledger with")
	runs := fs.Int("runs", 1, "measure every row `N` times and print the median run, with the range of the ratios (scale rows: on one fill)")
	pause := fs.Duration("cycle-pause", 0, "how long the cycles rows wait after each prune before the next fill")
	vacuum := fs.Bool("cycle-vacuum", false, "the cycles rows prune with --vacuum (on PostgreSQL a VACUUM after each prune, timed with it)")
	asJSON := fs.Bool("json", false, "print one JSON object per row on stdout instead of the table")
	outFile := fs.String("out", "", "also write one JSON object per row to `FILE`")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof)")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	var cs []int
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1024 {
			return usageError(fs, stderr, "--concurrency %q: want numbers from 1 to 1024, like 1,8,32", *conc)
		}
		cs = append(cs, n)
	}
	var groups []string
	for _, g := range strings.Split(*rows, ",") {
		groups = append(groups, strings.TrimSpace(g))
	}
	spec, err := proverDB(*db)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *keys < bench.MinKeys || *keys > bench.MaxKeys {
		return usageError(fs, stderr, "--keys %d: want %d…%d", *keys, bench.MinKeys, bench.MaxKeys)
	}
	if *runs < 1 || *runs > bench.MaxRuns {
		return usageError(fs, stderr, "--runs %d: want 1…%d", *runs, bench.MaxRuns)
	}
	opts := &bench.Options{DB: spec, Duration: *dur, Concurrency: cs, Groups: groups, Keys: *keys, Runs: *runs, CyclePause: *pause, CycleVacuum: *vacuum, Progress: stderr}
	if exe, err := os.Executable(); err == nil {
		// The memory row runs the gateway as `idem serve`, a process of its own.
		opts.GatewayCommand = func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }
	}
	if *dur < 100*time.Millisecond || *dur > time.Hour {
		return usageError(fs, stderr, "--duration %v: want 100ms…1h", *dur)
	}
	for _, g := range groups {
		if !slices.Contains(bench.Groups, g) {
			return usageError(fs, stderr, "--rows: unknown row group %q (known: %s)", g, strings.Join(bench.Groups, ", "))
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "idem bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "idem bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	results, err := bench.Run(ctx, opts)
	if *asJSON {
		if werr := bench.WriteJSON(stdout, results); werr != nil {
			fmt.Fprintln(stderr, "idem bench:", werr)
			return 1
		}
	} else {
		if len(results) > 0 {
			fmt.Fprintf(stdout, "idem bench %s: %s, %s, GOMAXPROCS=%d, %s, %v per side\n\n", start.UTC().Format("2006-01-02 15:04 UTC"),
				results[0].Driver, results[0].Durability, runtime.GOMAXPROCS(0), runtime.Version(), *dur)
		}
		bench.WriteTable(stdout, results)
	}
	if *outFile != "" {
		if werr := writeFile(*outFile, func(w io.Writer) error { return bench.WriteJSON(w, results) }); werr != nil {
			fmt.Fprintln(stderr, "idem bench:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem bench:", err)
		return 1
	}
	return 0
}
