package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// eventArgs picks what the worker does with its job.
type eventArgs struct {
	Do string `json:"do"`
}

func (eventArgs) Kind() string { return "event" }

// Every kind of event reaches a subscriber with the job's record: a
// completion with its output, a failed attempt then its retry's
// completion, a dead letter, a snooze, a cancel of an available job and a
// cancel of a running one. A subscription to one kind gets only that kind.
func TestSubscribeSeesEveryKind(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		running := make(chan int64, 1)
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[eventArgs]) error {
			switch j.Args.Do {
			case "complete":
				return jobs.RecordOutput(ctx, map[string]int{"n": 7})
			case "fail-once":
				if j.Attempt == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			case "dead":
				return jobs.Permanent(errors.New("never works"))
			case "snooze":
				if j.Attempt == 1 {
					return jobs.Snooze(10 * time.Millisecond)
				}
				return nil
			case "block":
				running <- j.ID
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return fmt.Errorf("unknown %q", j.Args.Do)
		}))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: 3 * time.Second, PollInterval: 20 * time.Millisecond,
			Backoff: func(int) time.Duration { return 10 * time.Millisecond }, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		all, stopAll := c.Subscribe()
		deadOnly, stopDead := c.Subscribe(jobs.EventDead)
		ids := map[string]int64{}
		for _, do := range []string{"complete", "fail-once", "dead", "snooze", "block"} {
			r, err := c.Enqueue(ctx, eventArgs{Do: do}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids[do] = r.Job.ID
		}
		later, err := c.Enqueue(ctx, eventArgs{Do: "complete"}, &jobs.EnqueueOpts{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(ctx)
		if _, err := c.Cancel(ctx, later.Job.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Cancel(ctx, <-running); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{
			fmt.Sprint(ids["complete"], jobs.EventCompleted): true,
			fmt.Sprint(ids["fail-once"], jobs.EventFailed):   true, fmt.Sprint(ids["fail-once"], jobs.EventCompleted): true,
			fmt.Sprint(ids["dead"], jobs.EventDead):      true,
			fmt.Sprint(ids["snooze"], jobs.EventSnoozed): true, fmt.Sprint(ids["snooze"], jobs.EventCompleted): true,
			fmt.Sprint(later.Job.ID, jobs.EventCancelled): true,
			fmt.Sprint(ids["block"], jobs.EventCancelled): true,
		}
		timeout := time.After(30 * time.Second)
		for len(want) > 0 {
			var ev *jobs.Event
			select {
			case ev = <-all:
			case <-timeout:
				t.Fatalf("events never seen: %v", want)
			}
			key := fmt.Sprint(ev.Job.ID, ev.Kind)
			if !want[key] {
				t.Fatalf("unexpected event %s: %+v", key, ev.Job)
			}
			delete(want, key)
			switch {
			case ev.Kind == jobs.EventCompleted && ev.Job.ID == ids["complete"]:
				if ev.Job.State != idemtype.JobCompleted || string(ev.Job.Result) != `{"n":7}` {
					t.Fatalf("completed event: state %s, result %q", ev.Job.State, ev.Job.Result)
				}
			case ev.Kind == jobs.EventFailed:
				if ev.Job.State != idemtype.JobAvailable || ev.Error != "first attempt fails" || len(ev.Job.Errors) != 1 {
					t.Fatalf("failed event: %+v, error %q", ev.Job, ev.Error)
				}
			case ev.Kind == jobs.EventDead:
				if ev.Job.State != idemtype.JobDead || ev.Job.FinalizedAt.IsZero() {
					t.Fatalf("dead event: %+v", ev.Job)
				}
			case ev.Kind == jobs.EventSnoozed:
				if ev.Job.State != idemtype.JobAvailable || ev.Job.MaxAttempts != jobs.DefaultMaxAttempts+1 {
					t.Fatalf("snoozed event: %+v", ev.Job)
				}
			case ev.Kind == jobs.EventCancelled:
				if ev.Job.State != idemtype.JobCancelled {
					t.Fatalf("cancelled event: %+v", ev.Job)
				}
			}
		}
		stopAll()
		stopAll()       // twice is harmless
		for range all { // what was buffered before the end; then the channel is closed
		}
		select {
		case ev := <-deadOnly:
			if ev.Kind != jobs.EventDead || ev.Job.ID != ids["dead"] {
				t.Fatalf("dead-only subscription got %s of job %d", ev.Kind, ev.Job.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("dead-only subscription saw nothing")
		}
		select {
		case ev := <-deadOnly:
			t.Fatalf("dead-only subscription got a second event: %s of job %d", ev.Kind, ev.Job.ID)
		default:
		}
		stopDead()
	})
}

// A subscriber that never reads does not hold workers up: its buffer
// fills, the rest is dropped and counted, and every job completes.
func TestSlowSubscriberDrops(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error { return nil }))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, EventBuffer: 2, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ch, stop := c.Subscribe(jobs.EventCompleted)
		defer stop()
		const n = 20
		for i := range n {
			if _, err := c.Enqueue(ctx, testArgs{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		runUntil(t, c, func() bool { cs, _ := c.Counts(ctx, ""); return cs[idemtype.JobCompleted] == n })
		if got := len(ch); got != 2 {
			t.Fatalf("buffered events = %d, want 2", got)
		}
		if got := c.DroppedEvents(); got != n-2 {
			t.Fatalf("DroppedEvents = %d, want %d", got, n-2)
		}
	})
}
