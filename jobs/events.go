package jobs

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// EventKind names what happened to a job.
type EventKind string

// The kinds of events a subscriber can ask for.
const (
	// EventCompleted: the job completed (Work returned nil, or CompleteTx
	// committed). Job.Result holds its output.
	EventCompleted EventKind = "completed"
	// EventFailed: an attempt failed and a retry is scheduled (Job.RunAt).
	EventFailed EventKind = "failed"
	// EventDead: the job was dead-lettered: a permanent error, or its last
	// attempt failed.
	EventDead EventKind = "dead"
	// EventCancelled: the job was cancelled (Client.Cancel).
	EventCancelled EventKind = "cancelled"
	// EventSnoozed: the worker returned Snooze; the job runs again at
	// Job.RunAt without spending an attempt.
	EventSnoozed EventKind = "snoozed"
)

// EventKinds lists every kind.
var EventKinds = []EventKind{EventCompleted, EventFailed, EventDead, EventCancelled, EventSnoozed}

// DefaultEventBuffer is the channel capacity of a subscription when
// Config.EventBuffer is zero.
const DefaultEventBuffer = 1024

// Event is one transition of one job, as this client saw it.
type Event struct {
	Kind EventKind
	// Job is the job after the transition. For a completion confirmed
	// after CompleteTx and for a cancel by Client.Cancel it is the row as
	// read from the database; otherwise it is the claimed row with the
	// write applied by this client (State, Result, Errors, RunAt,
	// MaxAttempts; FinalizedAt and UpdatedAt by this host's clock). It is
	// shared by every subscriber: do not modify it.
	Job *idemtype.JobRow
	// Error is the attempt's error for EventFailed and EventDead.
	Error string
	// RunTime is how long the work ran; zero for a job cancelled before it
	// was claimed.
	RunTime time.Duration
}

// hub fans events out to subscriptions without ever blocking a worker.
type hub struct {
	mu      sync.RWMutex
	subs    map[*subscription]struct{}
	dropped atomic.Uint64
}

type subscription struct {
	ch    chan *Event
	kinds []EventKind // nil: all
}

// Subscribe returns a channel of the events of the given kinds (all kinds
// if none) and a function that ends the subscription and closes the
// channel; call it once done. Events are those of this client: the jobs
// its workers ran (completed, failed, dead, snoozed, cancelled while
// running here) and the available jobs it cancelled with Cancel. A job
// another process ran or cancelled, or one that a lease rescue
// dead-lettered after its worker died, produces no event here.
//
// Delivery never blocks a worker: each subscription has a buffer of
// Config.EventBuffer events, and an event that finds it full is dropped
// for that subscription and counted in DroppedEvents. A subscriber that
// must see every transition reads the jobs table instead (List); events
// are for reacting quickly, not for bookkeeping.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	s := &subscription{ch: make(chan *Event, c.cfg.EventBuffer), kinds: slices.Clone(kinds)}
	h := &c.events
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscription]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
			close(s.ch)
		})
	}
}

// DroppedEvents counts the events dropped because a subscription's buffer
// was full, over the client's life.
func (c *Client) DroppedEvents() uint64 { return c.events.dropped.Load() }

// emit delivers e to every subscription that wants its kind, dropping it
// where the buffer is full.
func (h *hub) emit(e *Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.subs {
		if s.kinds != nil && !slices.Contains(s.kinds, e.Kind) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			h.dropped.Add(1)
		}
	}
}

// active reports whether anyone listens, so that workers build no event
// for nobody.
func (h *hub) active() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs) > 0
}

// emitFinish builds the event of a finish write this client made.
func (ex *execution) emitFinish(p driver.FinishJobParams) {
	h := &ex.c.events
	if !h.active() {
		return
	}
	r := *ex.rec
	now := time.Now()
	r.State, r.LeaseUntil, r.UpdatedAt = p.State, time.Time{}, now
	e := &Event{Job: &r, RunTime: ex.runTime()}
	switch {
	case p.State == idemtype.JobCompleted:
		e.Kind, r.Result, r.FinalizedAt = EventCompleted, p.Result, now
	case p.State == idemtype.JobDead:
		e.Kind, r.FinalizedAt = EventDead, now
	case p.Snooze:
		e.Kind, r.MaxAttempts = EventSnoozed, r.MaxAttempts+1
	case p.Error != "":
		e.Kind = EventFailed
	default:
		return // a release: the job is merely handed back
	}
	if p.State == idemtype.JobAvailable {
		r.RunAt = now.Add(p.Delay)
	}
	if p.Error != "" {
		e.Error = p.Error
		r.Errors = append(slices.Clip(r.Errors), idemtype.JobError{Attempt: ex.fence.Attempt, At: now, Error: p.Error})
	}
	h.emit(e)
}

// emitRow sends an event carrying a row read from the database.
func (c *Client) emitRow(kind EventKind, r idemtype.JobRow, ran time.Duration) {
	if !c.events.active() {
		return
	}
	c.events.emit(&Event{Kind: kind, Job: &r, RunTime: ran})
}

// emitCancelled sends the cancel of a running job whose run this client
// saw end.
func (ex *execution) emitCancelled() {
	if !ex.c.events.active() {
		return
	}
	r := *ex.rec
	now := time.Now()
	r.State, r.LeaseUntil, r.UpdatedAt, r.FinalizedAt = idemtype.JobCancelled, time.Time{}, now, now
	ex.c.events.emit(&Event{Kind: EventCancelled, Job: &r, RunTime: ex.runTime()})
}
