// Package procsig names the signals that pause a process and let it go
// on, for the tests and the prover that stop a lease holder past its
// lease (SIGSTOP, SIGCONT). Windows has no such signals: there, sending
// them fails, and so do only the scenarios that pause a process.
package procsig
