//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package pgtest

import (
	"os"
	"syscall"
)

// On other platforms Available reports false: tests skip, Start fails.
const platformSupported = false

type runAs struct {
	name     string
	home     string
	uid, gid uint32
}

func serverUser() (*runAs, error)             { return nil, nil }
func sysProcAttr(*runAs) *syscall.SysProcAttr { return nil }
func chown(string, *runAs) error              { return nil }
func searchableByOthers(string) bool          { return true }
func lockOwner(string) (*os.File, error)      { return nil, nil }
func reapStale(string, string)                {}
func postmasterPID(string) (int, bool)        { return 0, false }
func isPostmaster(int, string) bool           { return false }
func reraise(os.Signal)                       { os.Exit(1) }
