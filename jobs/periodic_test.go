package jobs_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
)

// Three processes enqueue periodic job "tick" every period (RunOnStart)
// and work it. One is SIGKILLed mid-period and restarted; later all three
// are SIGKILLed mid-period and restarted. Every period has at most one job
// and every job ran at most once; every period from the first process's
// start to the end has a job, but for the periods that began and ended
// while all three were down (skipped, as documented).
func TestPeriodicExactlyOncePerPeriod(t *testing.T) {
	const period = 1500 * time.Millisecond
	forEachDriver(t, func(t *testing.T, e *env) {
		spawned := 0
		// spawn starts a process and returns once its client has started.
		spawn := func() (*child, time.Time) {
			spawned++
			c, out, _ := startChild(t, childOpts{mode: modePeriodic, url: e.url, name: fmt.Sprintf("p%d", spawned),
				lease: 2 * time.Second, poll: 50 * time.Millisecond, slots: 2, period: period, stdin: true})
			if line, err := out.ReadString('\n'); line != "started\n" {
				t.Fatalf("%s said %q (%v)\n%s", c.name, line, err, c.stderr)
			}
			go io.Copy(io.Discard, out)
			return c, time.Now()
		}
		kill := func(c *child) time.Time {
			c.cmd.Process.Signal(syscall.SIGKILL)
			<-c.exited
			if !c.killed() {
				t.Fatalf("%s exited on its own: %v\n%s", c.name, c.err, c.stderr)
			}
			return time.Now()
		}
		// midPeriod waits until the middle of the period after next.
		midPeriod := func() {
			time.Sleep(time.Until(jobs.Every(period).Next(time.Now().Add(period)).Add(period / 2)))
		}
		kids := make([]*child, 3)
		var firstUp time.Time
		for i := range kids {
			var up time.Time
			kids[i], up = spawn()
			if i == 0 {
				firstUp = up
			}
		}
		midPeriod()
		kill(kids[0])
		kids[0], _ = spawn()
		midPeriod()
		var allDown time.Time
		for _, k := range kids {
			allDown = kill(k)
		}
		var upAgain time.Time
		for i := range kids {
			var up time.Time
			kids[i], up = spawn()
			if i == 0 {
				upAgain = up
			}
		}
		midPeriod()
		var end time.Time
		for _, k := range kids {
			end = kill(k)
		}

		rows, err := e.db.Query(`SELECT unique_key FROM idem_jobs ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]int{} // by period start, Unix ns
		for rows.Next() {
			var key string
			if err := rows.Scan(&key); err != nil {
				t.Fatal(err)
			}
			at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(key, "periodic:tick:"))
			if err != nil || !at.Equal(at.Truncate(period)) {
				t.Fatalf("key %q is not a period start (%v)", key, err)
			}
			have[at.UnixNano()]++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		skipped := 0
		for at := firstUp.Truncate(period); at.Before(end.Truncate(period)); at = at.Add(period) {
			down := at.After(allDown) && !at.Add(period).After(upAgain) // began and ended with no process up
			switch n := have[at.UnixNano()]; {
			case n > 1:
				t.Errorf("period %v has %d jobs", at, n)
			case n == 0 && down:
				skipped++
			case n == 0:
				t.Errorf("period %v has no job (processes up from %v; all down %v … %v)", at, firstUp, allDown, upAgain)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM (SELECT job_id FROM effects GROUP BY job_id HAVING count(*) > 1) d`); n != 0 {
			t.Fatalf("%d periodic jobs ran more than once", n)
		}
		t.Logf("%d periods with a job, %d skipped while all were down, over %v with %d processes started",
			len(have), skipped, end.Sub(firstUp).Round(time.Millisecond), spawned)
	})
}

// Every's periods start at multiples of d; Cron takes five or six fields
// and descriptors, in UTC, and refuses @every and nonsense; a PeriodicJob
// needs a name, a schedule and Args.
func TestSchedules(t *testing.T) {
	at := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	if got, want := jobs.Every(time.Hour).Next(at), time.Date(2030, 5, 6, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Every(1h).Next = %v, want %v", got, want)
	}
	if got := jobs.Every(time.Minute).Next(time.Date(2030, 5, 6, 7, 8, 0, 0, time.UTC)); !got.Equal(time.Date(2030, 5, 6, 7, 9, 0, 0, time.UTC)) {
		t.Errorf("Every(1m).Next of a period start = %v, want the next one", got)
	}
	for expr, want := range map[string]time.Time{
		"*/15 * * * *":                  time.Date(2030, 5, 6, 7, 15, 0, 0, time.UTC),
		"30 */10 * * * *":               time.Date(2030, 5, 6, 7, 10, 30, 0, time.UTC),
		"@daily":                        time.Date(2030, 5, 7, 0, 0, 0, 0, time.UTC),
		"CRON_TZ=Asia/Tokyo 0 17 * * *": time.Date(2030, 5, 6, 8, 0, 0, 0, time.UTC),
	} {
		s, err := jobs.Cron(expr)
		if err != nil {
			t.Errorf("Cron(%q): %v", expr, err)
			continue
		}
		if got := s.Next(at.In(time.FixedZone("elsewhere", 5*3600))); !got.Equal(want) {
			t.Errorf("Cron(%q).Next = %v, want %v", expr, got, want)
		}
	}
	for _, bad := range []string{"@every 1m", "* * *", "61 * * * *", ""} {
		if _, err := jobs.Cron(bad); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Cron(%q): %v; want ErrInvalid", bad, err)
		}
	}
	args := func() (jobs.Args, *jobs.EnqueueOpts) { return testArgs{}, nil }
	for _, bad := range [][]jobs.PeriodicJob{
		{{Name: "", Schedule: jobs.Every(time.Hour), Args: args}},
		{{Name: "x", Args: args}},
		{{Name: "x", Schedule: jobs.Every(time.Hour)}},
		{{Name: "x", Schedule: jobs.Every(time.Hour), Args: args}, {Name: "x", Schedule: jobs.Every(time.Minute), Args: args}},
	} {
		if _, err := jobs.New(newEnv(t, "sqlite").l, &jobs.Config{PeriodicJobs: bad}); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("%+v: %v; want ErrInvalid", bad, err)
		}
	}
	if got, want := jobs.PeriodicKey("nightly", at.In(time.FixedZone("x", 3600))), "periodic:nightly:2030-05-06T07:08:09Z"; got != want {
		t.Errorf("PeriodicKey = %q, want %q", got, want)
	}
}
