package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

const (
	jobsPauseUsage  = "idem jobs pause [--db URL] [--json] QUEUE"
	jobsResumeUsage = "idem jobs resume [--db URL] [--json] QUEUE"
	jobsQueuesUsage = "idem jobs queues [--db URL] [--json]"
)

// queueJSON is a queue in --json output.
type queueJSON struct {
	Queue    string                    `json:"queue"`
	Paused   bool                      `json:"paused"`
	PausedAt *time.Time                `json:"paused_at,omitempty"`
	Jobs     map[idemtype.JobState]int `json:"jobs,omitempty"`
	// OldestWaitingMS is how long the oldest due available job has
	// waited, in milliseconds; absent when none is waiting.
	OldestWaitingMS int64 `json:"oldest_waiting_ms,omitempty"`
}

func toQueueJSON(q idemtype.JobQueue, counts map[idemtype.JobState]int) queueJSON {
	out := queueJSON{Queue: q.Name, Paused: q.Paused, Jobs: counts}
	if q.Paused {
		at := q.PausedAt
		out.PausedAt = &at
	}
	return out
}

func runJobsPause(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runJobsPauseResume(ctx, "pause", jobsPauseUsage, `
Pauses a queue on every host: from now on no worker, in any process,
claims its jobs, until idem jobs resume. Enqueueing goes on; the jobs wait.
Jobs already running are not stopped: they run to completion (a failed
one's retry waits for the resume). Pausing a paused queue changes nothing.
The queue need not have jobs yet.

  idem jobs pause email
  idem jobs queues`, args, stdout, stderr)
}

func runJobsResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runJobsPauseResume(ctx, "resume", jobsResumeUsage, `
Resumes a paused queue on every host: workers claim its due jobs again
(at once on PostgreSQL, within their poll interval on SQLite). Resuming a
queue that is not paused changes nothing.

  idem jobs resume email`, args, stdout, stderr)
}

func runJobsPauseResume(ctx context.Context, verb, usage, help string, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs "+verb, usage, stderr)
	setUsage(fs, usage, help)
	db := fs.String("db", "", dbFlagHelp)
	asJSON := fs.Bool("json", false, "print the queue as JSON")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, stderr, "want one QUEUE, got %d arguments", len(pos))
	}
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs "+verb, err)
	}
	defer l.Close()
	var q *idemtype.JobQueue
	if verb == "pause" {
		q, err = c.Pause(ctx, pos[0])
	} else {
		q, err = c.Resume(ctx, pos[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem jobs %s: %v\n", verb, jobsErr(err))
		return 1
	}
	if *asJSON {
		err = writeJSON(stdout, toQueueJSON(*q, nil))
	} else if q.Paused {
		_, err = fmt.Fprintf(stdout, "queue %s is paused (since %s): no worker claims its jobs until idem jobs resume %s\n",
			q.Name, past(q.PausedAt, time.Now()), q.Name)
	} else {
		_, err = fmt.Fprintf(stdout, "queue %s is running: workers claim its jobs\n", q.Name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem jobs %s: %v\n", verb, err)
		return 1
	}
	return 0
}

func runJobsQueues(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs queues", jobsQueuesUsage, stderr)
	setUsage(fs, jobsQueuesUsage, `
Lists every queue that has jobs or was ever paused: whether it is paused,
how long its oldest due job has waited, and its jobs by state. It counts
every job, so it reads the whole table.

  idem jobs queues
  idem jobs queues --json | jq '.[] | select(.paused)'`)
	db := fs.String("db", "", dbFlagHelp)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	pos, code, done := parseArgs(fs, args, stdout)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	l, c, err := openJobs(ctx, *db, nil)
	if err != nil {
		return openFailed(stderr, "jobs queues", err)
	}
	defer l.Close()
	qs, err := c.Queues(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs queues:", jobsErr(err))
		return 1
	}
	if *asJSON {
		out := make([]queueJSON, len(qs))
		for i, q := range qs {
			out[i] = toQueueJSON(q.JobQueue, q.Counts)
			out[i].OldestWaitingMS = q.OldestAvailable.Milliseconds()
		}
		err = writeJSON(stdout, out)
	} else {
		header := []string{"QUEUE", "STATUS", "OLDEST WAITING"}
		for _, s := range jobStates {
			header = append(header, string(s))
		}
		t := newTable(stdout, header...)
		now := time.Now()
		for _, q := range qs {
			oldest := "-"
			if q.OldestAvailable > 0 {
				oldest = q.OldestAvailable.Round(time.Second).String()
			}
			row := []string{q.Name, queueStatus(q, now), oldest}
			for _, s := range jobStates {
				row = append(row, strconv.Itoa(q.Counts[s]))
			}
			t.row(row...)
		}
		err = t.flush()
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem jobs queues:", err)
		return 1
	}
	return 0
}

func queueStatus(q jobs.QueueInfo, now time.Time) string {
	if q.Paused {
		return "paused " + past(q.PausedAt, now)
	}
	return "running"
}

// pausedQueues names the paused queues, for notes in jobs list; nil if
// they cannot be read (the list still shows).
func pausedQueues(ctx context.Context, c *jobs.Client) map[string]bool {
	qs, err := c.Queues(ctx)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, q := range qs {
		if q.Paused {
			out[q.Name] = true
		}
	}
	return out
}
