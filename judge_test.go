package idem

import (
	"testing"
	"time"
)

// TestJudge checks the state machine for an existing record as the pure
// function it is, at every boundary. The drivers are tested against the
// same behaviour by driver/drivertest.
func TestJudge(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	rec := func(st State, mod func(*Record)) Record {
		r := Record{State: st, Fingerprint: "fp", Attempt: 3, Now: now}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	lease := func(d time.Duration) func(*Record) { return func(r *Record) { r.LeaseUntil = now.Add(d) } }
	done := func(expires, tomb time.Duration) func(*Record) {
		return func(r *Record) { r.ExpiresAt, r.TombstoneUntil = now.Add(expires), now.Add(tomb) }
	}
	op := Op{Key: "k", Fingerprint: "fp", Stale: Redo}
	other := Op{Key: "k", Fingerprint: "other", Stale: Redo}
	with := func(p StalePolicy) Op { o := op; o.Stale = p; return o }

	for _, c := range []struct {
		name string
		op   Op
		r    Record
		want verdict
	}{
		{"released", op, rec(StateReleased, nil), takeFresh},
		{"released, other fingerprint", other, rec(StateReleased, nil), takeFresh},
		{"live lease", op, rec(StateInProgress, lease(ms)), giveInFlight},
		{"lease ends now", op, rec(StateInProgress, lease(0)), takeStale},
		{"lease ended", op, rec(StateInProgress, lease(-ms)), takeStale},
		{"stale, park", with(Park), rec(StateInProgress, lease(0)), parkStale},
		{"stale, reconcile", with(Reconcile), rec(StateInProgress, lease(0)), askStale},
		{"live lease, other fingerprint", other, rec(StateInProgress, lease(ms)), giveMismatch},
		{"stale, other fingerprint", other, rec(StateInProgress, lease(-ms)), giveMismatch},
		{"succeeded", op, rec(StateSucceeded, done(ms, time.Hour)), giveReplay},
		{"failed", op, rec(StateFailed, done(ms, time.Hour)), giveReplay},
		{"succeeded, other fingerprint", other, rec(StateSucceeded, done(ms, time.Hour)), giveMismatch},
		{"retention ends now", op, rec(StateSucceeded, done(0, time.Hour)), giveExpired},
		{"tombstone", op, rec(StateTombstone, done(-time.Hour, ms)), giveExpired},
		{"tombstone window ends now", op, rec(StateTombstone, done(-time.Hour, 0)), takeFresh},
		{"succeeded past tombstone window", other, rec(StateSucceeded, done(-time.Hour, 0)), takeFresh},
		{"no tombstone kept", op, rec(StateSucceeded, done(0, 0)), takeFresh},
		{"parked", op, rec(StateParked, nil), giveParked},
		{"parked, other fingerprint", other, rec(StateParked, nil), giveMismatch},
		{"unknown state", op, rec(State("from_the_future"), nil), giveParked},
	} {
		if got := judge(c.op, c.r); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}
