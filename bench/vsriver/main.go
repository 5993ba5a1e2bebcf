// Command vsriver measures idem's jobs package side by side with River
// (github.com/riverqueue/river) on the same databases, with the same
// settings and the same no-op worker, and prints a Markdown table of
// medians, ranges and ratios. It is a module of its own so that River
// never enters idem's go.mod.
//
//	go run . --db sqlite                                # SQLite files in a temporary directory
//	go run . --db postgres --pg postgres://u@/postgres?host=/tmp/pg&port=5432
//	go run . --db sqlite,postgres --runs 3 --jobs 20000 --workers 100
//
// Workloads (each on a fresh database per side, sides in alternating
// order from run to run):
//
//   - drain: --jobs jobs inserted in bulk beforehand; jobs/s from Start to
//     the last completion.
//   - bulk: --jobs jobs inserted through the bulk API (idem's
//     EnqueueManyFast, River's InsertManyFast) in calls of --batch; jobs/s.
//   - steady: --producers goroutines insert --jobs jobs one call each
//     (Enqueue, Insert) while the client works them; jobs/s from the first
//     insert to the last completion, and the p99 of enqueue→run (from the
//     call that enqueued a job to its worker starting it).
//
// A completion counts when the side's event subscription reports it, which
// both libraries do after the completion committed; afterwards each side's
// own table is checked to hold every job completed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vsriver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vsriver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		dbList   = fs.String("db", "sqlite", "databases, comma-separated: sqlite, postgres")
		pgURL    = fs.String("pg", os.Getenv("VSRIVER_PG"), "PostgreSQL URL of an existing database on a server where the user may CREATE DATABASE (default $VSRIVER_PG)")
		dir      = fs.String("dir", "", "directory for the SQLite files (default: a new temporary directory, removed afterwards)")
		runs     = fs.Int("runs", 3, "runs of every workload")
		wlList   = fs.String("workloads", strings.Join(workloadNames, ","), "workloads, comma-separated")
		sideList = fs.String("sides", "idem,river", "sides to run (one side alone: for --cpuprofile)")
		profile  = fs.String("cpuprofile", "", "write a CPU profile of the whole run to FILE (samples labelled side=idem|river)")
		o        = options{}
	)
	fs.IntVar(&o.Jobs, "jobs", 20_000, "jobs per workload")
	fs.IntVar(&o.Workers, "workers", 100, "workers (MaxWorkers of the one queue)")
	fs.IntVar(&o.Producers, "producers", 8, "producers of the steady workload")
	fs.IntVar(&o.Batch, "batch", 1000, "jobs per bulk insert call")
	fs.DurationVar(&o.FetchCooldown, "fetch-cooldown", 2*time.Millisecond, "FetchCooldown, both sides")
	fs.DurationVar(&o.PollInterval, "poll", 20*time.Millisecond, "River's FetchPollInterval and idem's PollInterval")
	pool := fs.Int("pool", 32, "PostgreSQL pool size, both sides")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound on one side's one workload")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.PoolSize = int32(*pool)
	if o.Jobs < 1 || o.Workers < 1 || o.Producers < 1 || o.Batch < 1 || *runs < 1 || *pool < 2 {
		return errors.New("--jobs, --workers, --producers, --batch and --runs must be at least 1, --pool at least 2")
	}
	dbKinds, err := pick(*dbList, []string{"sqlite", "postgres"}, "--db")
	if err != nil {
		return err
	}
	wls, err := pick(*wlList, workloadNames, "--workloads")
	if err != nil {
		return err
	}
	sides, err := pick(*sideList, []string{"idem", "river"}, "--sides")
	if err != nil {
		return err
	}
	if slices.Contains(dbKinds, "postgres") && *pgURL == "" {
		return errors.New("--db postgres needs --pg URL (or $VSRIVER_PG)")
	}
	if *dir == "" && slices.Contains(dbKinds, "sqlite") {
		d, err := os.MkdirTemp("", "vsriver-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	fmt.Fprintf(stdout, "vsriver %s: %s, GOMAXPROCS %d, load average %s at start\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOMAXPROCS(0), loadAvg())
	fmt.Fprintf(stdout, "%d jobs, %d workers, %d producers, bulk batches of %d, fetch cooldown %v, poll %v, pool %d (PostgreSQL); %d runs\n\n",
		o.Jobs, o.Workers, o.Producers, o.Batch, o.FetchCooldown, o.PollInterval, o.PoolSize, *runs)
	res := results{}
	for _, kind := range dbKinds {
		dbs := &databases{kind: kind, dir: *dir, pgURL: *pgURL}
		for r := range *runs {
			for _, wl := range wls {
				order := slices.Clone(sides)
				if r%2 == 1 {
					slices.Reverse(order)
				}
				for _, side := range order {
					var m map[string]float64
					var err error
					pprof.Do(ctx, pprof.Labels("side", side), func(ctx context.Context) {
						m, err = runWorkload(ctx, dbs, side, wl, o)
					})
					if err != nil {
						return fmt.Errorf("%s, run %d: %w", kind, r+1, err)
					}
					fmt.Fprintf(stderr, "%s run %d %-6s %-5s %s\n", kind, r+1, wl, side, formatMetrics(m))
					for metric, v := range m {
						res.add(kind, metric, side, v)
					}
				}
			}
		}
	}
	fmt.Fprintf(stdout, "%s\nload average %s at the end\n", res.table(dbKinds, *runs), loadAvg())
	return nil
}

// pick splits a comma-separated flag value and checks each word.
func pick(list string, allowed []string, flagName string) ([]string, error) {
	var out []string
	for w := range strings.SplitSeq(list, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !slices.Contains(allowed, w) {
			return nil, fmt.Errorf("%s: %q is not one of %s", flagName, w, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty", flagName)
	}
	return out, nil
}

func formatMetrics(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// loadAvg returns the 1, 5 and 15 minute load averages (Linux), or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
