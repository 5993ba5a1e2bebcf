package brokertest

import "syscall"

// childAttr puts a server in its own process group (so its helpers can be
// stopped with it) and kills it when the process that started it dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
