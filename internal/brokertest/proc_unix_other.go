//go:build unix && !linux

package brokertest

import "syscall"

// childAttr puts a server in its own process group, so that its helpers
// can be stopped with it. Only Linux can also kill it when the process
// that started it dies.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
