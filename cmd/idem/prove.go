package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idemdev/idem/prove"
)

const proveUsage = `idem prove [--db URL] [--scenario NAME]... [--ops N] [--workers N] [--seed S] [--json] [--out FILE]
       idem prove --target URL [--effects-cmd CMD] [--ops N] [--workers N] [--json] [--out FILE]`

func init() {
	register(command{
		name:    "prove",
		usage:   proveUsage,
		summary: "attack idem (or your endpoint) with crashes, duplicates and retry storms; count effects",
		run:     runProve,
	})
	register(command{
		name:    "prove-worker",
		usage:   "idem prove-worker (internal: started by idem prove, orders on stdin)",
		summary: "(internal) a worker process of idem prove",
		hidden:  true,
		run: func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			return prove.WorkerMain(ctx, stdin, stdout, stderr)
		},
	})
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func runProve(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("prove", proveUsage, stderr)
	var cfg prove.Config
	var scenarios stringList
	fs.StringVar(&cfg.DB, "db", "", "database `URL`: empty or sqlite for a temporary SQLite file, postgres for a throwaway cluster from the system's binaries, or a URL (sqlite:PATH, postgres://…, host=… dbname=…) to use, and leave, your own")
	fs.Var(&scenarios, "scenario", "run only this scenario (repeatable, or comma-separated; a name selects all its variants)")
	fs.IntVar(&cfg.Ops, "ops", prove.DefaultOps, "operations per scenario")
	fs.IntVar(&cfg.Workers, "workers", prove.DefaultWorkers, "worker processes at a time")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for the random choices (which operation dies where); 0 picks one, always printed")
	fs.DurationVar(&cfg.Lease, "lease", prove.DefaultLease, "lease of the attacked claims; recovery waits for it")
	asJSON := fs.Bool("json", false, "print the results as JSON on stdout instead of the table")
	outFile := fs.String("out", "", "also write the results as JSON to `FILE`")
	historyFile := fs.String("history", "", "write every attempt (invoke, ok, fail, unknown) as JSON lines to `FILE`")
	fs.StringVar(&cfg.Target, "target", "", "attack your own endpoint at `URL` through a gateway the prover starts")
	fs.StringVar(&cfg.EffectsCmd, "effects-cmd", "", "with --target: a shell `CMD` that prints how many effects the endpoint performed for the key in $1 (also $IDEM_KEY)")
	fs.BoolVar(&cfg.NoGuard, "no-guard", false, "workers skip the ledger: every attack should FAIL (shows the prover can fail)")
	fs.Usage = func() { proveHelp(fs.Output(), fs.PrintDefaults) }
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	if cfg.Ops < 1 || cfg.Workers < 1 {
		return usageError(fs, stderr, "--ops and --workers must be at least 1")
	}
	if cfg.Lease < 50*time.Millisecond {
		return usageError(fs, stderr, "--lease must be at least 50ms")
	}
	if cfg.NoGuard && cfg.Target != "" {
		return usageError(fs, stderr, "--no-guard applies to the prover's own workers, not to --target")
	}
	if cfg.EffectsCmd != "" && cfg.Target == "" {
		return usageError(fs, stderr, "--effects-cmd needs --target")
	}
	if cfg.Target != "" {
		if err := prove.CheckTarget(cfg.Target); err != nil {
			return usageError(fs, stderr, "%v", err)
		}
	}
	if err := prove.CheckScenarios(scenarios, cfg.Target != ""); err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	db, err := proverDB(cfg.DB)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	cfg.DB = db
	cfg.Scenarios = scenarios
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "idem prove: finding my own binary to start workers:", err)
		return 1
	}
	cfg.Worker, cfg.Serve = []string{exe, "prove-worker"}, []string{exe, "serve"}
	cfg.Progress, cfg.Live = stderr, isTerminal(stderr)
	if *historyFile != "" {
		f, err := os.Create(*historyFile)
		if err != nil {
			fmt.Fprintln(stderr, "idem prove:", err)
			return 1
		}
		defer f.Close()
		cfg.History = f
	}

	rep, err := prove.Run(ctx, cfg)
	if rep == nil {
		fmt.Fprintln(stderr, "idem prove:", err)
		return 1
	}
	if *asJSON {
		if werr := prove.WriteJSON(stdout, rep); werr != nil {
			fmt.Fprintln(stderr, "idem prove:", werr)
			return 1
		}
	} else {
		fmt.Fprintln(stdout)
		prove.WriteTable(stdout, rep)
	}
	if *outFile != "" {
		if werr := writeFile(*outFile, func(w io.Writer) error { return prove.WriteJSON(w, rep) }); werr != nil {
			fmt.Fprintln(stderr, "idem prove:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem prove:", err)
		return 1
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// writeFile creates name and fills it with write.
func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}

func proveHelp(w io.Writer, printDefaults func()) {
	fmt.Fprintf(w, "Usage: %s\n\n", proveUsage)
	fmt.Fprint(w, `Attacks idem with real worker processes (this binary, started again) and
counts the effects that happened: workers are SIGKILLed at named crash
points, handed the same operation at once, stormed with retries, paused
past their lease; batches are replayed; PostgreSQL is restarted. Prints a
table (scenario, operations, attempts, effects, duplicates, lost,
parked/unknown, verdict). Exit status 0 only when every scenario holds
(no duplicate, no loss, no mix-up, nothing stuck), 1 otherwise, 2 for bad
usage. See docs/prove.md.

Flags:
`)
	printDefaults()
	fmt.Fprint(w, "\nScenarios:\n")
	for _, s := range prove.Scenarios() {
		fmt.Fprintf(w, "  %-20s %s\n", s.Name, s.Summary)
		if len(s.Variants) > 0 {
			fmt.Fprintf(w, "  %-20s variants: %s\n", "", strings.Join(s.Variants, ", "))
		}
	}
	fmt.Fprint(w, `
With --target URL the rows are target/parallel (duplicates at once),
target/dropped (the client hangs up before the answer, then retries) and
target/storm (three client timeouts, then patience), through gateways the
prover starts in front of URL; the endpoint gets POSTs with a JSON body
{"idem_prove": KEY, "amount": 100} and the forwarded Idempotency-Key.

Examples:
  idem prove                                   every scenario on a temporary SQLite file
  idem prove --db postgres                     on a throwaway PostgreSQL (db-restart included)
  idem prove --ops 10000 --db postgres         the long run
  idem prove --scenario crash-after-call --seed 42 --out out.json
  idem prove --no-guard --scenario duplicate-delivery   watch it fail without idem
  idem prove --target http://localhost:3000/payments --effects-cmd './count-payments "$1"'
`)
}

// isTerminal reports whether w is a terminal, for live counters.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
