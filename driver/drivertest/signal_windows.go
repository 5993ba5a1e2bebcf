package drivertest

import "syscall"

// sigStop and sigCont would pause a child past its lease and let it go
// on; Windows has no such signals, and sending these fails, which fails
// the tests that pause a child there.
var sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)
