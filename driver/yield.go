package driver

import (
	"context"
	"time"
)

// Yield is how a PacedPruner waits between its steps so that live traffic
// goes first: the pause its duty asks for, then until the database's
// writes have been idle for Quiet, at most until the steps' share of the
// time is down to Floor (or the duty, if lower). Under load that never
// leaves the writes idle the sweep runs at that share, so it backs off and
// still finishes.
type Yield struct {
	// Floor is the least share of the time the steps keep, under load.
	Floor float64
	// Quiet is how long the writes must have been idle for the next step
	// to go before its floor.
	Quiet time.Duration
	// Longest bounds a pause.
	Longest time.Duration
	// IdleFor reports how long the writes the sweep gives way to have been
	// idle: zero while one is in flight or waiting.
	IdleFor func() time.Duration
}

// Wait waits after a step that took took, counting from since (when the
// step ended: what the caller did since counts towards the pause). Duty 1
// or more does not wait. It returns ctx's error if ctx ends first.
func (y Yield) Wait(ctx context.Context, since time.Time, took time.Duration, duty float64) error {
	if duty >= 1 {
		return nil
	}
	floor := min(duty, y.Floor)
	paused := since.Add(min(time.Duration(float64(took)*(1-duty)/duty), y.Longest))
	deadline := since.Add(min(time.Duration(float64(took)*(1-floor)/floor), y.Longest))
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		var wait time.Duration
		switch now, idle := time.Now(), y.IdleFor(); {
		case now.Before(paused):
			wait = paused.Sub(now)
		case idle >= y.Quiet || !now.Before(deadline):
			return nil
		default:
			wait = min(y.Quiet-idle, deadline.Sub(now))
		}
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
