// Package crashpoint holds named places where a test or the prover can make
// the process die as hard as a power cut to the process can: SIGKILL, with
// no deferred code, no flush, no goodbye.
//
// Crash points are disarmed in every program that imports idem. Only two
// kinds of process arm them, from the environment variable EnvVar:
//
//   - test binaries (testing.Testing), so that a test re-executing itself
//     as a child (the helper-process idiom) arms points in the production
//     code, unchanged;
//   - the prover's own processes, which call ArmFromEnv at their entry
//     (prove.WorkerMain, and cmd/idem for the processes idem prove starts).
//
// A service that happens to run with EnvVar set is not affected.
//
// The EnvVar syntax:
//
//	IDEM_CRASHPOINT=after-claim          die at the first hit of after-claim
//	IDEM_CRASHPOINT=after-call:3         die at the third hit
//	IDEM_CRASHPOINT=after-claim,after-commit:2   either
//
// Unarmed, Hit costs one atomic load.
package crashpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// EnvVar is the environment variable that names the points to arm.
const EnvVar = "IDEM_CRASHPOINT"

// Names of the crash points compiled into idem.
const (
	AfterClaim    = "after-claim"    // a claim is held, nothing done yet
	AfterCall     = "after-call"     // the external call returned, not yet recorded
	BeforeCommit  = "before-commit"  // the local effect is written, its transaction not committed
	AfterCommit   = "after-commit"   // committed, the caller not yet answered
	MidResponse   = "mid-response"   // part of an HTTP response written
	AfterDelivery = "after-delivery" // an outbox message was delivered, not yet recorded
	MidBatch      = "mid-batch"      // a group commit ran its writes, not yet committed; nobody answered

	// JobAfterClaim: a batch of jobs was claimed and committed; this job
	// has not started. Recovery: its lease ends, the next claim rescues it.
	JobAfterClaim = "job-after-claim"
	// JobBeforeCommit: CompleteTx wrote the completion in the handler's
	// transaction, which has not committed. Recovery: the transaction, the
	// effect in it and the completion vanish together; the job runs again.
	JobBeforeCommit = "job-before-commit"
	// JobAfterCommit: the handler returned nil (its CompleteTx committed);
	// the client has not yet confirmed it. Recovery: none needed.
	JobAfterCommit = "job-after-commit"

	// StepStarted: an external step of a run is marked started; its call
	// has not been made. Recovery: the step's lookup decides, else the run
	// parks.
	StepStarted = "step-started"
	// StepAfterCall: an external step's call returned; its result is not
	// checkpointed. Recovery: as StepStarted (the lookup finds it done).
	StepAfterCall = "step-after-call"
	// StepBeforeCommit: a transaction step's writes and checkpoint are
	// written, not committed. Recovery: both vanish; the step runs again.
	StepBeforeCommit = "step-before-commit"
	// StepAfterCheckpoint: a step's checkpoint committed; the next step
	// has not begun. Recovery: resume after the step, without running it.
	StepAfterCheckpoint = "step-after-checkpoint"
)

var (
	armed atomic.Bool
	mu    sync.Mutex
	left  map[string]int // hits left before the kill
)

// Test binaries arm from the environment on their own: their children
// cannot all be reached by an explicit call (a driver's conformance child
// runs before any test code of ours).
func init() {
	if testing.Testing() {
		ArmFromEnv()
	}
}

// ArmFromEnv arms the points that EnvVar names (none if it is unset). Only
// the prover's processes call it; see the package documentation.
func ArmFromEnv() { Arm(os.Getenv(EnvVar)) }

// Arm replaces the armed points with spec (the EnvVar syntax). An empty
// spec disarms all.
func Arm(spec string) {
	mu.Lock()
	defer mu.Unlock()
	left = map[string]int{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, _ := strings.Cut(part, ":")
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			n = 1
		}
		left[name] = n
	}
	armed.Store(len(left) > 0)
}

// Hit kills the process with SIGKILL if name is armed and this is the
// armed hit; otherwise it returns at once.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	n, ok := left[name]
	if ok {
		n--
		left[name] = n
	}
	mu.Unlock()
	if ok && n == 0 {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Kill() // SIGKILL; on Windows, TerminateProcess
		}
		select {} // the kill is on its way; run nothing more
	}
}
