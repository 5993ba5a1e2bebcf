package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// Metrics receives a client's job transitions and run times.
// *metrics.Collector satisfies it; this package does not import metrics.
// Methods are called on the job's path and must not block.
type Metrics interface {
	// JobTransition counts one job of queue moving from one state to
	// another; see the Transition constants.
	JobTransition(queue, from, to string)
	// JobRun records how long one job's work ran and how its claim ended;
	// see the Run constants.
	JobRun(queue, outcome string, d time.Duration)
}

// The from and to values of Metrics.JobTransition. From and to are job
// states, except TransitionNone (before enqueue) and the three ends of a
// running job that are not states of their own: Retryable (failed, retry
// scheduled after backoff), Released (handed back by Stop, no failure
// counted) and Rescued (its worker stopped heartbeating and a claim took
// the job back after its lease).
//
//	none      → available   enqueued (also inside a transaction that later rolls back)
//	available → running     claimed
//	running   → completed   completed (by CompleteTx or by Work returning nil)
//	running   → retryable   failed with attempts left
//	running   → dead        dead-lettered: failed permanently or out of attempts
//	running   → released    handed back by Stop
//	running   → rescued     lease expired; counted by the client that claims the job next
//	running   → snoozed     put back by Snooze, no attempt spent
//	available → cancelled   cancelled before it ran (Cancel)
//	running   → cancelled   cancelled while it ran (Cancel)
//	dead      → available   requeued by an operator (Requeue)
//
// A rescue on the job's last attempt dead-letters it inside the claim's
// transaction and is not counted; idem_queue_depth and List show it.
const (
	TransitionNone      = "none"
	TransitionAvailable = string(idemtype.JobAvailable)
	TransitionRunning   = string(idemtype.JobRunning)
	TransitionCompleted = string(idemtype.JobCompleted)
	TransitionDead      = string(idemtype.JobDead)
	TransitionCancelled = string(idemtype.JobCancelled)
	TransitionSnoozed   = "snoozed"
	TransitionRetryable = "retryable"
	TransitionReleased  = "released"
	TransitionRescued   = "rescued"
)

// The outcome values of Metrics.JobRun.
const (
	RunSucceeded = "succeeded"  // completed
	RunRetry     = "retry"      // failed, retry scheduled
	RunDead      = "dead"       // failed, dead-lettered
	RunReleased  = "released"   // cut short by Stop and handed back
	RunLeaseLost = "lease_lost" // ended after another worker took the job: nothing recorded
	RunSnoozed   = "snoozed"    // put back by Snooze
	RunCancelled = "cancelled"  // ended after Cancel: nothing recorded
	RunError     = "error"      // the write ending the claim failed: the job is rescued after its lease
)

// noMetrics is the default Config.Metrics.
type noMetrics struct{}

func (noMetrics) JobTransition(queue, from, to string)          {}
func (noMetrics) JobRun(queue, outcome string, d time.Duration) {}

// rescuedPrefix starts the error both drivers record on a job whose lease
// expired and that a claim handed back (see driver.ClaimJobsParams).
const rescuedPrefix = "lease expired: "

// rescued reports whether a just-claimed job was handed back by a rescue:
// the error recorded for its previous attempt is the lease expiry.
func rescued(r *idemtype.JobRow) bool {
	n := len(r.Errors)
	return n > 0 && r.Errors[n-1].Attempt == r.Attempt-1 && strings.HasPrefix(r.Errors[n-1].Error, rescuedPrefix)
}

// QueueDepth counts the available jobs (due, scheduled or waiting for a
// retry) of every queue in Config.Queues, one count per queue. Its
// signature is metrics.QueueDepthFunc's: pass it to
// (*metrics.Collector).QueueDepthFrom to export idem_queue_depth.
func (c *Client) QueueDepth(ctx context.Context) (map[string]int64, error) {
	out := make(map[string]int64, len(c.cfg.Queues))
	for _, q := range c.knownQueues() {
		n, err := c.drv.CountJobs(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("jobs: queue depth of %s: %w", q, err)
		}
		out[q] = int64(n[idemtype.JobAvailable])
	}
	return out, nil
}
