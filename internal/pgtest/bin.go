package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Available reports whether initdb, pg_ctl and postgres were found, and the
// directory holding them. See the package documentation for the search
// order. The result is computed once per process.
func Available() (binDir string, ok bool) {
	return findBinaries()
}

var findBinaries = sync.OnceValues(func() (string, bool) {
	if !platformSupported {
		return "", false
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if dir := filepath.Dir(real); hasBinaries(dir) {
				return dir, true
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range slices.Backward(dirs) {
		if hasBinaries(dir) {
			return dir, true
		}
	}
	return "", false
})

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions orders "9.6" < "10" < "15" < "15.2"; parts that are not
// numbers sort first.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		x, y := -1, -1
		if i < len(as) {
			if n, err := strconv.Atoi(as[i]); err == nil {
				x = n
			}
		}
		if i < len(bs) {
			if n, err := strconv.Atoi(bs[i]); err == nil {
				y = n
			}
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}
