package jobs

import (
	"context"

	"github.com/idemdev/idem"
)

// CompleteRunsArgs is the job that sweeps abandoned multi-step runs once
// (idem.Completer.CompleteOnce); CompleteRuns makes it periodic.
type CompleteRunsArgs struct{}

// Kind returns "idem.complete_runs".
func (CompleteRunsArgs) Kind() string { return "idem.complete_runs" }

// CompleteRuns runs a Completer from the jobs client, instead of its own
// loop: it registers in ws a worker of CompleteRunsArgs whose job is one
// sweep (c.CompleteOnce), and returns the periodic job to put in
// Config.PeriodicJobs, named "idem.complete_runs", that enqueues one sweep
// per period of s (Every(5*time.Second), say) across every host running
// the client. Runs abandoned after a step (their holder died or gave up)
// are thus finished with no client retry, by one host at a time; each run
// is claimed by one resumer anyway, so a sweep that overlaps a Completer's
// own loop elsewhere is safe.
//
// A sweep's failure (the database unreachable) is retried with backoff;
// the failure of one run is logged by the completer and left to the next
// sweep. Give the ledger the runs' code (idem.AddRun) in every process
// whose client works the queue.
func CompleteRuns(ws *Workers, c *idem.Completer, s Schedule) PeriodicJob {
	AddWorker(ws, WorkFunc(func(ctx context.Context, _ *Job[CompleteRunsArgs]) error {
		_, err := c.CompleteOnce(ctx)
		return err
	}))
	return PeriodicJob{Name: CompleteRunsArgs{}.Kind(), Schedule: s, RunOnStart: true,
		Args: func() (Args, *EnqueueOpts) { return CompleteRunsArgs{}, nil }}
}
