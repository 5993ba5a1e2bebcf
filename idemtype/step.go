package idemtype

import "time"

// StepState is where one step of a multi-step run is.
type StepState string

// Step states. A transaction step goes straight to done, in the
// transaction of its local writes; an external step is marked started
// before its call, so a resumer knows that the call's outcome is unknown.
const (
	StepRun     StepState = "run"     // the run's header (Index -1): its registered name and input
	StepStarted StepState = "started" // an external call began; its outcome is not recorded
	StepDone    StepState = "done"    // finished; Result is its checkpoint
)

// Step is one recovery point of a run: a row per (scope, key, index).
type Step struct {
	Scope, Key string
	// Index is the step's position in the run, from 0; -1 is the run's
	// header, whose Name is the run's registered name and Result its input.
	Index int
	Name  string
	State StepState
	// Attempt is the run's fencing token when the row was written.
	Attempt int64
	// Fingerprint is the run's fingerprint when the row was written: steps
	// of another request under a reused key are never resumed.
	Fingerprint string
	// Result is the step's result (JSON) once done.
	Result    []byte
	UpdatedAt time.Time
}

// RunRef names a run a completer may resume: an in-progress record with a
// run header whose lease has ended.
type RunRef struct {
	Scope, Key string
}
