package procsig

import "syscall"

// Stop and Cont carry the Unix numbers of SIGSTOP and SIGCONT; Windows's
// os.Process.Signal refuses every signal but os.Kill, so sending them
// fails.
var Stop, Cont = syscall.Signal(0x13), syscall.Signal(0x12)
