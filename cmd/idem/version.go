package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	register(command{
		name:    "version",
		usage:   "idem version (or idem --version)",
		summary: "print the version",
		run: func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			fs := newFlagSet("version", "idem version (or idem --version)", stderr)
			pos, code, done := parseArgs(fs, args, stdout)
			if done {
				return code
			}
			if len(pos) > 0 {
				return usageError(fs, stderr, "unexpected argument %q", pos[0])
			}
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(stdout, "idem %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return 0
		},
	})
}
