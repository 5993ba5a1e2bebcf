//go:build unix

package brokertest

import "syscall"

// signalGroup sends sig to every process of the group pgid: a server and
// its own children (RabbitMQ's helpers).
func signalGroup(pgid int, sig syscall.Signal) { syscall.Kill(-pgid, sig) }
