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
		summary: "apply the schema, or print it for your own tools",
		run:     runMigrate,
	})
}

func runMigrate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "idem migrate [--db URL] [--print]", stderr)
	db := fs.String("db", defaultDB(), "database URL (env IDEM_DB)")
	print := fs.Bool("print", false, "print the SQL for the database's driver instead of applying it")
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if *print {
		var migs []driver.Migration
		switch {
		case strings.HasPrefix(*db, "sqlite"):
			migs = sqlite.Migrations()
		case strings.HasPrefix(*db, "postgres"):
			migs = postgres.Migrations()
		default:
			fmt.Fprintf(stderr, "idem migrate: unknown database scheme in %q (want sqlite:PATH or postgres://…)\n", *db)
			return 2
		}
		for _, m := range migs {
			fmt.Fprintf(stdout, "-- %04d_%s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		}
		return 0
	}
	drv, err := dburl.OpenDriver(ctx, *db)
	if err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	defer drv.Close()
	if err := drv.Setup(ctx, driver.Config{NoMigrate: true}); err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	if err := drv.Migrate(ctx); err != nil {
		fmt.Fprintln(stderr, "idem migrate:", err)
		return 1
	}
	fmt.Fprintf(stdout, "migrated %s: %d migrations applied or already present\n", drv.Name(), len(drv.Migrations()))
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
// with code (0 after --help, which prints usage to stdout; 2 after a bad
// flag, whose message the flag package already wrote to stderr).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			out := fs.Output()
			fs.SetOutput(stdout)
			fs.Usage()
			fs.SetOutput(out)
			return 0, true
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2, true
	}
	return 0, false
}
