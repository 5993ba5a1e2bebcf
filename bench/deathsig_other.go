//go:build !linux

package bench

import "os/exec"

// setDeathSignal does nothing outside Linux: the bench ends its child on
// every path it controls.
func setDeathSignal(*exec.Cmd) {}
