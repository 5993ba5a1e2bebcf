package prove

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Event types in a history.
const (
	Invoke  = "invoke"  // an attempt at an operation started
	OK      = "ok"      // it returned a result (Value), possibly replayed
	Fail    = "fail"    // it certainly did nothing (Kind says why)
	Unknown = "unknown" // nobody can say whether it did anything: killed, timed out, connection lost
)

// Event is one entry of a history: an attempt at an operation starting or
// ending, as seen by the process that made it. Every attempt is an Invoke
// followed by exactly one of OK, Fail or Unknown; an attempt whose process
// died before it answered ends Unknown.
type Event struct {
	Time   time.Time `json:"time"`
	Proc   string    `json:"proc"` // "pid 4242/g1" (a worker's goroutine) or "client 3"
	Op     string    `json:"op"`   // the operation's key
	Type   string    `json:"type"`
	Value  string    `json:"value,omitempty"` // the result an OK returned
	Replay bool      `json:"replay,omitempty"`
	Kind   string    `json:"kind,omitempty"` // why a Fail did nothing
	Err    string    `json:"err,omitempty"`
}

// history records every attempt of one scenario, from many processes.
type history struct {
	mu     sync.Mutex
	events []Event
	open   map[string]int // proc → index of its unanswered Invoke

	// Progress counters.
	attempts int
	unknown  int
	settled  map[string]bool
}

func newHistory() *history {
	return &history{open: map[string]int{}, settled: map[string]bool{}}
}

// add appends e. An answer without an Invoke from the same process is a
// broken worker and an error.
func (h *history) add(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Type {
	case Invoke:
		if i, ok := h.open[e.Proc]; ok {
			// A process that starts again without answering abandoned the
			// earlier attempt; it never does, but the history stays well formed.
			h.closeLocked(i, Event{Proc: e.Proc, Type: Unknown, Err: "abandoned", Time: e.Time})
		}
		h.open[e.Proc] = len(h.events)
		h.attempts++
	default:
		i, ok := h.open[e.Proc]
		if !ok {
			return fmt.Errorf("%s %s without an invoke from %s", e.Type, e.Op, e.Proc)
		}
		delete(h.open, e.Proc)
		if e.Op == "" {
			e.Op = h.events[i].Op
		}
		h.count(e)
	}
	h.events = append(h.events, e)
	return nil
}

func (h *history) closeLocked(i int, e Event) {
	e.Op = h.events[i].Op
	delete(h.open, e.Proc)
	h.count(e)
	h.events = append(h.events, e)
}

func (h *history) count(e Event) {
	switch e.Type {
	case OK:
		h.settled[e.Op] = true
	case Unknown:
		h.unknown++
	}
}

// abandon ends, as Unknown with reason, every open attempt of the
// processes whose names start with prefix (a worker that died).
func (h *history) abandon(prefix, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var idx []int
	for proc, i := range h.open {
		if strings.HasPrefix(proc, prefix) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	now := time.Now()
	for _, i := range idx {
		h.closeLocked(i, Event{Proc: h.events[i].Proc, Type: Unknown, Err: reason, Time: now})
	}
}

// snapshot returns a copy of the events so far.
func (h *history) snapshot() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// isSettled reports whether op has had an OK.
func (h *history) isSettled(op string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.settled[op]
}

// stats returns the progress counters.
func (h *history) stats() (attempts, settled, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts, len(h.settled), h.unknown
}
