//go:build unix

package drivertest

import "syscall"

// sigStop and sigCont pause a child past its lease and let it go on.
var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
