package pgtest

import "syscall"

// bouncerProcAttr runs PgBouncer as the cluster's user, and has the kernel
// stop it if the test process dies first (no Close ran).
func bouncerProcAttr(r *runAs) *syscall.SysProcAttr {
	a := sysProcAttr(r)
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Pdeathsig = syscall.SIGTERM
	return a
}
