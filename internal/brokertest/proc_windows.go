package brokertest

import (
	"os"
	"syscall"
)

// signalGroup ends the server pid: Windows has no signals to send nor
// process groups to send them to, so whatever sig asks, it kills the
// process (its own children stay).
func signalGroup(pid int, sig syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

// childAttr has nothing to set on Windows.
func childAttr() *syscall.SysProcAttr { return nil }
