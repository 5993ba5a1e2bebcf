package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// runLog is a jobs.Metrics that hands every run's outcome to a channel,
// so that a test knows when a claim has ended and how.
type runLog struct {
	mu          sync.Mutex
	transitions []string
	runs        chan string
}

func newRunLog() *runLog { return &runLog{runs: make(chan string, 100)} }

func (r *runLog) JobTransition(queue, from, to string) {
	r.mu.Lock()
	r.transitions = append(r.transitions, from+"→"+to)
	r.mu.Unlock()
}

func (r *runLog) JobRun(queue, outcome string, d time.Duration) { r.runs <- outcome }

func (r *runLog) saw(transition string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.transitions {
		if s == transition {
			return true
		}
	}
	return false
}

// A job with one attempt snoozes twice and still completes: a snooze
// spends no attempt (MaxAttempts grows with each), records no error, and
// the job runs again after the snooze.
func TestSnoozeSpendsNoAttempt(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			if j.Attempt <= 2 {
				return jobs.Snooze(10 * time.Millisecond)
			}
			return completeWithEffect(ctx, j, "w")
		}))
		log := newRunLog()
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(), Metrics: log})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool { j, _ := c.Get(ctx, r.Job.ID); return j.State.Final() })
		j, err := c.Get(ctx, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != idemtype.JobCompleted || j.Attempt != 3 || j.MaxAttempts != 3 || len(j.Errors) != 0 {
			t.Fatalf("job after two snoozes: state %s, attempt %d/%d, errors %v", j.State, j.Attempt, j.MaxAttempts, j.Errors)
		}
		for _, want := range []string{jobs.RunSnoozed, jobs.RunSnoozed, jobs.RunSucceeded} {
			if got := <-log.runs; got != want {
				t.Fatalf("run outcome %q, want %q", got, want)
			}
		}
		if !log.saw(jobs.TransitionRunning + "→" + jobs.TransitionSnoozed) {
			t.Fatalf("no running→snoozed transition in %v", log.transitions)
		}
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// A snooze is scheduled after its delay, like a retry: an hour's snooze
// leaves the job available with RunAt an hour ahead of the database clock.
func TestSnoozeSchedulesTheJob(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			return jobs.Snooze(time.Hour)
		}))
		log := newRunLog()
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, PollInterval: 20 * time.Millisecond, Logger: quietLogger(), Metrics: log})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, testArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if got := <-log.runs; got != jobs.RunSnoozed {
			t.Fatalf("run outcome %q, want snoozed", got)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := c.Get(ctx, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ahead := j.RunAt.Sub(j.Now); j.State != idemtype.JobAvailable || ahead < 59*time.Minute || ahead > time.Hour ||
			j.Attempt != 1 || j.MaxAttempts != r.Job.MaxAttempts+1 || len(j.Errors) != 0 {
			t.Fatalf("snoozed job: state %s, runs in %v, attempt %d/%d, errors %v", j.State, ahead, j.Attempt, j.MaxAttempts, j.Errors)
		}
	})
}

// A worker that lost its lease (another took the job over: simulated by
// changing the lease id under it, as a SIGSTOP past the lease would) and
// then snoozes is refused: the job is not rescheduled, its attempts are
// not raised, and the run ends as lease_lost.
func TestSnoozeAfterLeaseLostIsRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		started := make(chan int64, 1)
		cause := make(chan error, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			started <- j.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return jobs.Snooze(time.Hour)
		}))
		log := newRunLog()
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: time.Second, PollInterval: 20 * time.Millisecond, Logger: quietLogger(), Metrics: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, testArgs{}, &jobs.EnqueueOpts{MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		id := <-started
		// The new holder: same attempt, another lease id, a lease of an hour
		// so that nobody rescues it during the test.
		takeOver(t, e, id)
		before, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-cause; !errors.Is(err, jobs.ErrLeaseLost) {
			t.Fatalf("context cause = %v, want ErrLeaseLost", err)
		}
		if got := <-log.runs; got != jobs.RunLeaseLost {
			t.Fatalf("run outcome %q, want lease_lost", got)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != idemtype.JobRunning || j.LeaseID != before.LeaseID || j.MaxAttempts != 5 || !j.RunAt.Equal(before.RunAt) {
			t.Fatalf("a stale worker's snooze changed the job: %+v", j)
		}
	})
}

// takeOver does to a running job what another worker's claim would after
// its holder paused past the lease: the same attempt under a new lease id,
// here with a lease of an hour so that nobody rescues it during the test.
func takeOver(t *testing.T, e *env, id int64) {
	t.Helper()
	hour := "lease_until + 3600000"
	if e.driver == "postgres" {
		hour = "lease_until + interval '1 hour'"
	}
	e.exec(t, `UPDATE idem_jobs SET lease_id = lease_id + 1, lease_until = `+hour+` WHERE id = ?`, id)
}
