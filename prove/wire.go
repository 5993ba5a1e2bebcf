package prove

import (
	"encoding/json"
	"io"
	"os"
	"sync"

	"github.com/idemdev/idem/internal/crashpoint"
)

// WorkerEnv marks a process as a prover worker. The parent sets it to "1"
// on every worker it starts, so a binary that is not idem (a test binary
// re-executed by the helper-process idiom) can tell that it should run
// WorkerMain instead of its usual main.
const WorkerEnv = "IDEM_PROVE_WORKER"

// IsWorker reports whether this process was started as a prover worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) == "1" }

// ArmCrashPoints arms the crash points that IDEM_CRASHPOINT names, if this
// process was started by the prover (IsWorker): a worker or a gateway.
// The prover's binary calls it first thing; in any other process crash
// points stay disarmed, whatever the environment says.
func ArmCrashPoints() {
	if IsWorker() {
		crashpoint.ArmFromEnv()
	}
}

// Worker roles.
const (
	roleDo     = "do"     // Ledger.Do whose Func writes an effect row in the same transaction
	roleCall   = "call"   // Claim, call the counting provider with the key, Complete
	roleServer = "server" // an HTTP server doing slow work under a claim (retry-storm)
	roleHold   = "hold"   // claim, report, wait (to be paused), then try to commit
	roleJobs   = "jobs"   // enqueue or work jobs (double-enqueue)
	roleBroker = "broker" // consume a broker's messages through its adapter (broker-redelivery)
	roleSteps  = "steps"  // Ledger.Run: a row, a charge at Provider, a notification at Notifier (multi-step)
)

// spec is what a worker is told: the first line on its stdin, as JSON.
// Later lines on stdin are commands ("go").
type spec struct {
	Role  string   `json:"role"`
	DB    string   `json:"db"`
	Scope string   `json:"scope"`
	Keys  []string `json:"keys,omitempty"`
	// Goroutines > 1 runs every key on that many goroutines at once
	// (duplicate delivery); default 1.
	Goroutines  int    `json:"goroutines,omitempty"`
	LeaseMS     int64  `json:"lease_ms"`
	RetentionMS int64  `json:"retention_ms,omitempty"`
	Stale       string `json:"stale,omitempty"`    // redo (default), park, reconcile
	Provider    string `json:"provider,omitempty"` // the counting provider's base URL
	WorkMS      int64  `json:"work_ms,omitempty"`  // how long the server's work takes
	// Notifier is the multi-step notification provider's base URL; Notify
	// is what it can do ("lookup" or "blind").
	Notifier string `json:"notifier,omitempty"`
	Notify   string `json:"notify,omitempty"`
	PaceMS   int64  `json:"pace_ms,omitempty"` // a pause before each operation
	// WaitGo makes the worker report ready and wait for "go" (or EOF) on
	// stdin before it starts, so that many workers start together.
	WaitGo bool `json:"wait_go,omitempty"`
	// RetryInFlight retries an operation that another holder has in flight
	// (backing off) until it settles; RetryErrors also retries errors whose
	// outcome is unknown (a dead connection). Both stop at DeadlineMS.
	RetryInFlight bool  `json:"retry_in_flight,omitempty"`
	RetryErrors   bool  `json:"retry_errors,omitempty"`
	DeadlineMS    int64 `json:"deadline_ms,omitempty"`
	// Jobs is "enqueue", "work" or "periodic", for roleJobs, on Queue.
	Jobs  string `json:"jobs,omitempty"`
	Queue string `json:"queue,omitempty"`
	// Broker (a broker-redelivery variant) is consumed at BrokerURL from
	// BrokerDest (a stream or queue), for roleBroker.
	Broker     string `json:"broker,omitempty"`
	BrokerURL  string `json:"broker_url,omitempty"`
	BrokerDest string `json:"broker_dest,omitempty"`
	// The periodic attack's period, its first period's start (Unix ms)
	// and how many periods are operations.
	PeriodMS int64 `json:"period_ms,omitempty"`
	StartMS  int64 `json:"start_ms,omitempty"`
	Periods  int   `json:"periods,omitempty"`
	// NoGuard skips the ledger: the worker performs every effect it is
	// asked to, at the same crash points. It exists to show that the
	// prover fails a worker without idem.
	NoGuard bool `json:"no_guard,omitempty"`
	// Kafka is a Kafka consumer's orders, for roleKafka.
	Kafka *kafkaSpec `json:"kafka,omitempty"`
}

// Event names a worker writes on stdout, one JSON object a line.
const (
	evReady     = "ready"     // waiting for go
	evListening = "listening" // a server's address is Addr
	evClaimed   = "claimed"   // a holder holds its keys (Count of them)
	evInvoke    = "invoke"    // an attempt at Key starts
	evOK        = "ok"        // the attempt returned Body (Replay: from the ledger)
	evFail      = "fail"      // the attempt certainly did nothing (Kind says why)
	evUnknown   = "unknown"   // the attempt's outcome is unknown (Err)
	evError     = "error"     // the worker itself failed (Err); it exits non-zero
)

// Fail kinds: why an attempt certainly did not perform the effect.
const (
	failInFlight  = "in_flight"  // another holder has the key
	failParked    = "parked"     // the outcome is unknown and parked
	failExpired   = "expired"    // a replay past retention, detected
	failLeaseLost = "lease_lost" // fenced: the write was refused
	failMismatch  = "mismatch"   // the key was used with another request
	failFailed    = "failed"     // a permanent failure was replayed
)

// wireEvent is one line a worker writes.
type wireEvent struct {
	Ev     string `json:"ev"`
	G      int    `json:"g,omitempty"` // the worker's goroutine, when it runs several
	Key    string `json:"key,omitempty"`
	Body   string `json:"body,omitempty"`
	Replay bool   `json:"replay,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Err    string `json:"err,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Token  int64  `json:"token,omitempty"` // the fencing token of a refused write
	Count  int    `json:"count,omitempty"` // how many claims a holder holds
}

// emitter writes events as JSON lines, one at a time.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newEmitter(w io.Writer) *emitter { return &emitter{enc: json.NewEncoder(w)} }

func (e *emitter) emit(ev wireEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.enc.Encode(ev) // a parent that stopped reading has its own problems
}
