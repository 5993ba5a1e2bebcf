package prove

import "syscall"

// sigStop and sigCont would pause a worker past its lease and let it go
// on; Windows has no such signals, and sending these fails, which fails
// the scenarios that pause a worker there.
var sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)
