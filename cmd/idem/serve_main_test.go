package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
)

// idemBin is the idem binary the serve tests run as real processes, built
// once by TestMain (with -race when the tests run with -race).
var idemBin string

const binDirPrefix = "idem-serve-bin-"

func TestMain(m *testing.M) {
	reapBinDirs()
	dir, err := os.MkdirTemp("", binDirPrefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve tests:", err)
		os.Exit(1)
	}
	idemBin = filepath.Join(dir, "idem")
	args := []string{"build", "-o", idemBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "serve tests: go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pgtest.Main(m) // exits; the binary's directory is reaped by a later run
}

// reapBinDirs removes binaries that earlier test runs left (pgtest.Main
// exits, so a run cannot remove its own).
func reapBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			os.RemoveAll(d)
		}
	}
}
