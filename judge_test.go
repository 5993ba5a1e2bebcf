package idem

import (
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
)

// TestJudge checks the state machine for an existing record as the pure
// function it is, at every boundary. The drivers are tested against the
// same behaviour by driver/drivertest.
func TestJudge(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	rec := func(st idemtype.State, mod func(*idemtype.Record)) idemtype.Record {
		r := idemtype.Record{State: st, Fingerprint: "fp", Attempt: 3, Now: now}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	lease := func(d time.Duration) func(*idemtype.Record) {
		return func(r *idemtype.Record) { r.LeaseUntil = now.Add(d) }
	}
	done := func(expires, tomb time.Duration) func(*idemtype.Record) {
		return func(r *idemtype.Record) { r.ExpiresAt, r.TombstoneUntil = now.Add(expires), now.Add(tomb) }
	}
	op := Op{Key: "k", Fingerprint: "fp", Stale: StaleRedo}
	other := Op{Key: "k", Fingerprint: "other", Stale: StaleRedo}
	with := func(p StalePolicy) Op { o := op; o.Stale = p; return o }

	for _, c := range []struct {
		name string
		op   Op
		r    idemtype.Record
		want verdict
	}{
		{"released", op, rec(idemtype.StateReleased, nil), takeFresh},
		{"released, other fingerprint", other, rec(idemtype.StateReleased, nil), takeFresh},
		{"live lease", op, rec(idemtype.StateInProgress, lease(ms)), giveInFlight},
		{"lease ends now", op, rec(idemtype.StateInProgress, lease(0)), takeStale},
		{"lease ended", op, rec(idemtype.StateInProgress, lease(-ms)), takeStale},
		{"stale, park", with(StalePark), rec(idemtype.StateInProgress, lease(0)), parkStale},
		{"stale, reconcile", with(StaleReconcile), rec(idemtype.StateInProgress, lease(0)), askStale},
		{"live lease, other fingerprint", other, rec(idemtype.StateInProgress, lease(ms)), giveMismatch},
		{"stale, other fingerprint", other, rec(idemtype.StateInProgress, lease(-ms)), giveMismatch},
		{"succeeded", op, rec(idemtype.StateSucceeded, done(ms, time.Hour)), giveReplay},
		{"failed", op, rec(idemtype.StateFailed, done(ms, time.Hour)), giveReplay},
		{"succeeded, other fingerprint", other, rec(idemtype.StateSucceeded, done(ms, time.Hour)), giveMismatch},
		{"retention ends now", op, rec(idemtype.StateSucceeded, done(0, time.Hour)), giveExpired},
		{"tombstone", op, rec(idemtype.StateTombstone, done(-time.Hour, ms)), giveExpired},
		{"tombstone window ends now", op, rec(idemtype.StateTombstone, done(-time.Hour, 0)), takeFresh},
		{"succeeded past tombstone window", other, rec(idemtype.StateSucceeded, done(-time.Hour, 0)), takeFresh},
		{"no tombstone kept", op, rec(idemtype.StateSucceeded, done(0, 0)), takeFresh},
		{"parked", op, rec(idemtype.StateParked, nil), giveParked},
		{"parked, other fingerprint", other, rec(idemtype.StateParked, nil), giveMismatch},
		{"unknown state", op, rec(idemtype.State("from_the_future"), nil), giveParked},
	} {
		if got := judge(c.op, c.r); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}
