//go:build unix

package prove

import "syscall"

// sigStop and sigCont pause a worker past its lease and let it go on.
var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
