//go:build !linux

package pgtest

import "syscall"

// bouncerProcAttr runs PgBouncer as the cluster's user.
func bouncerProcAttr(r *runAs) *syscall.SysProcAttr { return sysProcAttr(r) }
