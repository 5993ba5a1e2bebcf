package bench

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill cmd's process if the bench dies
// without ending it (SIGKILL, a crash): no `idem serve` outlives it.
func setDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
