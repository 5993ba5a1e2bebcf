//go:build unix

package procsig

import "syscall"

// Stop pauses a process; Cont lets it go on.
var Stop, Cont = syscall.SIGSTOP, syscall.SIGCONT
