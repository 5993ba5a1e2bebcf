package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule says when a periodic job runs: Next returns the first run time
// strictly after t. A zero time means never again. Every host must compute
// the same times from the same schedule, so a Schedule depends on t alone
// (Every and Cron do; robfig/cron's ConstantDelaySchedule does not, as it
// counts from t).
type Schedule interface {
	Next(t time.Time) time.Time
}

// every runs at each multiple of d since the zero time.
type every time.Duration

func (e every) Next(t time.Time) time.Time { return t.Truncate(time.Duration(e)).Add(time.Duration(e)) }

// Every is a schedule that runs every d, at the multiples of d since the
// zero time (every hour on the hour UTC, every 5 minutes at :00, :05, …),
// so that every host agrees on the periods. d is at least 1ms.
func Every(d time.Duration) Schedule { return every(max(d, time.Millisecond)) }

// cronParser takes standard five-field expressions, an optional leading
// seconds field, and descriptors (@hourly, @every is refused: use Every).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSchedule evaluates a cron expression in UTC (or its CRON_TZ=).
type cronSchedule struct{ s cron.Schedule }

func (c cronSchedule) Next(t time.Time) time.Time { return c.s.Next(t.UTC()) }

// Cron parses a cron expression with github.com/robfig/cron/v3: five
// fields (minute hour day-of-month month day-of-week), or six with a
// leading seconds field, or a descriptor (@hourly, @daily, @weekly,
// @monthly, @yearly). Times are UTC unless the expression starts with
// CRON_TZ=Area/City. @every is refused: it counts from whenever a host
// starts, so hosts would disagree on the periods; use Every.
func Cron(expr string) (Schedule, error) {
	if len(expr) >= 6 && expr[:6] == "@every" {
		return nil, inputErr("cron", "%q: @every counts from each host's start; use jobs.Every", expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, inputErr("cron", "%q: %v", expr, err)
	}
	return cronSchedule{s}, nil
}

// PeriodicJob is a job enqueued once per period of its schedule (River's
// PeriodicJob), by whichever started client gets there first.
//
// Every started client with PeriodicJobs enqueues each job at each run
// time of its schedule, with the unique key "periodic:<Name>:<run time,
// RFC 3339, UTC>": the database takes the first and refuses the rest, so
// the job is enqueued exactly once per period however many hosts run it.
// Nothing is kept in memory between periods: a restarted client computes
// the next run time from the schedule.
//
// A period whose run time passed while no client was running is skipped,
// unless RunOnStart is set: then a starting client enqueues the job of the
// period in progress (the latest run time not after now), which is a
// duplicate, and so nothing, if that period's job was already enqueued.
// The key lasts as long as the job (Config.Retention once completed): keep
// Retention longer than the period for RunOnStart to stay exactly once.
// A client that falls behind by more than a period (a long GC pause, a
// suspended host) enqueues only the latest period it missed.
type PeriodicJob struct {
	// Name identifies the job across hosts and restarts; it is part of the
	// unique key. 1 to 200 bytes, printable. Unique within a Config.
	Name string
	// Schedule is when the job runs: Every(d), or Cron(expr).
	Schedule Schedule
	// Args makes the job for one period. Opts may be nil; its UniqueKey is
	// replaced by the periodic key and its Unique must be nil.
	Args func() (Args, *EnqueueOpts)
	// RunOnStart enqueues the job of the period in progress when a
	// client's Start is called, if no client has yet: see PeriodicJob.
	RunOnStart bool
}

const maxPeriodicNameLen = 200

func checkPeriodic(pjs []PeriodicJob) error {
	seen := map[string]bool{}
	for _, pj := range pjs {
		if err := checkText("periodic job name", pj.Name, maxPeriodicNameLen); err != nil {
			return err
		}
		switch {
		case seen[pj.Name]:
			return inputErr("periodic jobs", "name %q used twice", pj.Name)
		case pj.Schedule == nil:
			return inputErr("periodic jobs", "%q has no Schedule", pj.Name)
		case pj.Args == nil:
			return inputErr("periodic jobs", "%q has no Args", pj.Name)
		}
		seen[pj.Name] = true
	}
	return nil
}

// PeriodicKey is the unique key of a periodic job's job for the period
// that starts at at.
func PeriodicKey(name string, at time.Time) string {
	return "periodic:" + name + ":" + at.UTC().Format(time.RFC3339Nano)
}

// periodicLoop enqueues pj at each run time after now until stop closes.
func (c *Client) periodicLoop(ctx context.Context, stop <-chan struct{}, pj PeriodicJob, now time.Time) {
	if pj.RunOnStart {
		if at, ok := prevRun(pj.Schedule, now); ok {
			c.enqueuePeriodic(ctx, stop, pj, at)
		}
	}
	next := pj.Schedule.Next(now)
	for !next.IsZero() {
		if !sleep(stop, time.Until(next)) {
			return
		}
		c.enqueuePeriodic(ctx, stop, pj, next)
		n := pj.Schedule.Next(next)
		if now := time.Now(); !n.IsZero() && !n.After(now) {
			n, _ = prevRun(pj.Schedule, now) // behind: only the latest missed period
		}
		next = n
	}
}

// enqueuePeriodic enqueues pj's job for the period starting at at,
// retrying failures (the key makes a retry harmless) until the next run
// time comes or the client stops.
func (c *Client) enqueuePeriodic(ctx context.Context, stop <-chan struct{}, pj PeriodicJob, at time.Time) {
	until := pj.Schedule.Next(at)
	for {
		err := c.enqueuePeriodicOnce(ctx, pj, at)
		if err == nil {
			return
		}
		c.log.LogAttrs(ctx, slog.LevelError, "periodic enqueue failed", slog.String("periodic_job", pj.Name),
			slog.Time("period", at), slog.String("error", err.Error()))
		if !until.IsZero() && time.Now().Add(c.cfg.PollInterval).After(until) || !sleep(stop, c.cfg.PollInterval) {
			return
		}
	}
}

func (c *Client) enqueuePeriodicOnce(ctx context.Context, pj PeriodicJob, at time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("periodic job %q: Args panicked: %v", pj.Name, r)
		}
	}()
	args, opts := pj.Args()
	o := EnqueueOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Unique != nil {
		return inputErr("periodic jobs", "%q: EnqueueOpts.Unique must be nil; the period is the key", pj.Name)
	}
	o.UniqueKey = PeriodicKey(pj.Name, at)
	_, err = c.Enqueue(ctx, args, &o)
	return err
}

// prevRun is the latest run time of s not after now.
func prevRun(s Schedule, now time.Time) (time.Time, bool) {
	if e, ok := s.(every); ok {
		return now.Truncate(time.Duration(e)), true
	}
	for back := time.Minute; back <= 5*366*24*time.Hour; back *= 2 {
		f := s.Next(now.Add(-back))
		if f.IsZero() {
			return f, false
		}
		if f.After(now) {
			continue
		}
		for {
			n := s.Next(f)
			if n.IsZero() || n.After(now) {
				return f, true
			}
			f = n
		}
	}
	return time.Time{}, false
}
