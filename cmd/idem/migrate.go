package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/driver/sqlite"
)

func init() {
	register(command{
		name:    "migrate",
		usage:   "idem migrate [--db URL] [--print]",
		summary: "apply the schema (saying which migrations were new), or print it for your own tools",
		run:     runMigrate,
	})
}

func runMigrate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "idem migrate [--db URL] [--print]", stderr)
	db := fs.String("db", "", dbFlagHelp)
	print := fs.Bool("print", false, "print the SQL for the database's driver instead of applying it")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	open, u, err := openURL(*db)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *print {
		migs := sqlite.Migrations()
		if u.Driver == dburl.Postgres {
			migs = postgres.Migrations()
		}
		for _, m := range migs {
			fmt.Fprintf(stdout, "-- %04d_%s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		}
		return 0
	}
	drv, err := dburl.OpenDriver(ctx, open)
	if err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	defer drv.Close()
	if err := drv.Setup(ctx, driver.Config{NoMigrate: true}); err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	applied, err := drv.Migrate(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	var added []string
	for _, m := range applied {
		added = append(added, fmt.Sprintf("%04d_%s", m.Version, m.Name))
	}
	if len(added) == 0 {
		fmt.Fprintf(stdout, "migrated %s: nothing new; all %d migrations were already applied\n", drv.Name(), len(drv.Migrations()))
		return 0
	}
	fmt.Fprintf(stdout, "migrated %s: applied %d new of %d: %s\n", drv.Name(), len(added), len(drv.Migrations()), strings.Join(added, ", "))
	return 0
}

// newFlagSet makes a flag set whose errors and usage go to stderr.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; done reports that the command should exit now
// with code: 0 after --help, which prints usage to stdout; 2 after a bad
// flag, said in one line on stderr (usagef).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	out := fs.Output()
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(stdout)
			fs.Usage()
			fs.SetOutput(out)
			return 0, true
		}
	}
	fs.SetOutput(io.Discard) // the flag package would print the whole usage
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		return usagef(out, fs.Name(), "%v", err), true
	}
	return 0, false
}
