package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// JobQueue is one job queue, as the queues section shows it: paused or
// not (idem jobs pause), its jobs by state, and how long its oldest due
// job has waited (zero: none waits).
type JobQueue struct {
	Name            string
	Paused          bool
	PausedAt        time.Time
	Available       int
	Running         int
	Completed       int
	Dead            int
	Cancelled       int
	OldestAvailable time.Duration
}

// PauseQueueFunc pauses (pause true) or resumes a job queue on every host.
type PauseQueueFunc func(ctx context.Context, queue string, pause bool) error

// LedgerPauseQueue pauses and resumes job queues straight in the ledger's
// database, for Options.PauseQueue where no jobs client runs (idem
// serve): as idem jobs pause|resume does.
func LedgerPauseQueue(l *idem.Ledger) PauseQueueFunc {
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return func(ctx context.Context, queue string, pause bool) error {
		if err != nil {
			return err
		}
		if pause {
			_, err := c.Pause(ctx, queue)
			return err
		}
		_, err := c.Resume(ctx, queue)
		return err
	}
}

// JobQueuesFunc lists the job queues, by name.
type JobQueuesFunc func(ctx context.Context) ([]JobQueue, error)

// LedgerJobQueues lists the job queues straight from the ledger's
// database, for Options.JobQueues where no jobs client runs (idem serve):
// every queue that has jobs or was ever paused. It only reads, and counts
// every job.
func LedgerJobQueues(l *idem.Ledger) JobQueuesFunc {
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return func(ctx context.Context) ([]JobQueue, error) {
		if err != nil {
			return nil, err
		}
		qs, err := c.Queues(ctx)
		if err != nil {
			return nil, fmt.Errorf("job queues: %w", err)
		}
		out := make([]JobQueue, len(qs))
		for i, q := range qs {
			out[i] = JobQueue{Name: q.Name, Paused: q.Paused, PausedAt: q.PausedAt,
				Available: q.Counts[idemtype.JobAvailable], Running: q.Counts[idemtype.JobRunning], Completed: q.Counts[idemtype.JobCompleted],
				Dead: q.Counts[idemtype.JobDead], Cancelled: q.Counts[idemtype.JobCancelled], OldestAvailable: q.OldestAvailable}
		}
		return out, nil
	}
}

type queuesSection struct {
	Configured bool
	CanPause   bool // Write and a PauseQueue: the buttons are shown
	Items      []JobQueue
	Err        string
}

// pauseQueue is the pause and resume buttons' POST: refused without
// Write, without a PauseQueue, and without the form token.
func (s *server) pauseQueue(w http.ResponseWriter, r *http.Request) {
	if !s.writeForm(w, r, s.o.PauseQueue != nil, 16<<10, "pause or resume queues") {
		return
	}
	queue, action := r.PostForm.Get("queue"), r.PostForm.Get("action")
	if action != "pause" && action != "resume" {
		http.Error(w, "idem admin: action must be pause or resume", http.StatusBadRequest)
		return
	}
	if err := s.o.PauseQueue(r.Context(), queue, action == "pause"); err != nil {
		p := s.build(w, r, "", "", false)
		p.Error = action + " queue " + show(queue) + ": " + err.Error()
		s.render(w, http.StatusInternalServerError, "index.html", p)
		return
	}
	s.log.InfoContext(r.Context(), "operator "+action+"d a job queue from the admin page", "queue", queue, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/?refresh=off#queues", http.StatusSeeOther)
}

// age prints how long a job has waited, to the second.
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}
