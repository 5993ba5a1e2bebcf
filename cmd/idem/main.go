// Command idem is the command line for idem: the gateway (serve), the
// prover (prove), and the operator's tools (keys, reconcile, prune, jobs,
// outbox, migrate, fingerprint).
//
// Exit codes: 0 success; 1 the command ran and found a failure (a prove
// verdict, a refused reconcile, a database error); 2 bad usage or bad input.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/idemdev/idem/prove"
)

// command is one subcommand of idem.
type command struct {
	name    string // "serve"
	usage   string // "idem serve --upstream URL [flags]"
	summary string // one line for `idem help`
	hidden  bool   // left out of `idem help` (internal commands)
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// register adds a subcommand; each lives in its own file and registers
// itself from init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("idem: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	// Crash points stay disarmed unless idem prove started this process.
	prove.ArmCrashPoints()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "--version", "-version", "-v":
		return commands["version"].run(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, []string{"--help"}, stdin, stdout, stderr)
			}
		}
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q (see idem --help)\n", args[0])
		return 2
	}
	return c.run(ctx, args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "idem makes side effects happen once.")
	fmt.Fprintln(w, "\nUsage: idem <command> [flags]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'idem <command> --help' for a command's flags. The database is --db URL or $IDEM_DB")
	fmt.Fprintln(w, "(default sqlite:idem.db; postgres://… or host=… dbname=… for many hosts). 'idem --version' prints the version.")
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && strings.TrimSpace(v) != "" {
		return v
	}
	return def
}

// defaultDB is the database every command uses unless told otherwise.
func defaultDB() string { return envOr("IDEM_DB", "sqlite:idem.db") }

// subcommand is one verb of a command group such as `idem keys`.
type subcommand struct {
	names []string // the name, then aliases
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// runGroup dispatches args to the subcommand they name. With help it
// prints the group's help; alone it prints it to stderr and exits 2, like
// idem alone; an unknown subcommand is a usage error.
func runGroup(ctx context.Context, group string, help func(io.Writer), subs []subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		help(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		help(stdout)
		return 0
	}
	for _, sub := range subs {
		for _, n := range sub.names {
			if n == args[0] {
				return sub.run(ctx, args[1:], stdout, stderr)
			}
		}
	}
	return usagef(stderr, group, "unknown subcommand %q", args[0])
}
