//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package pgtest

import (
	"errors"
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

func children(int, string) ([]int, error) {
	return nil, errors.New("pgtest: listing a server's processes is not supported on this platform")
}
func sendSignal(int, procSignal) error {
	return errors.New("pgtest: signals are not supported on this platform")
}

type procSignal int

const (
	sigKill procSignal = iota
	sigStop
	sigCont
)
