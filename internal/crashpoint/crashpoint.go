// Package crashpoint holds named places where a test or the prover can make
// the process die as hard as a power cut to the process can: SIGKILL, with
// no deferred code, no flush, no goodbye.
//
// A point is armed through the environment, so the code under test is the
// production code, unchanged:
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
	"syscall"
)

// EnvVar is the environment variable that arms crash points.
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
)

var (
	armed atomic.Bool
	mu    sync.Mutex
	left  map[string]int // hits left before the kill
)

func init() { Arm(os.Getenv(EnvVar)) }

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
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; run nothing more
	}
}
