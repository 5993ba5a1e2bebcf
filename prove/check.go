package prove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// opView is everything the history and the database say about one
// operation.
type opView struct {
	oks      []Event
	unknown  int
	effects  []string
	state    idemtype.State // "" when the ledger has no record (or was not asked)
	hasState bool
}

// check reads the effects and the ledger after every worker has ended
// and judges the history against them:
//
//	once               at most one effect per operation (else duplicates)
//	no loss            an operation acknowledged ok has its effect (else lost)
//	no mix-up          every ok of an operation returned the same bytes, those of its effect
//	bounded stuck      no record left in progress
//	unknown is honest  an unknown attempt is never counted lost, never run twice
//	settled            every operation ended ok, or parked where that is allowed
func (t *trial) check(ctx context.Context, res Result) Result {
	events := t.h.snapshot()
	effects, err := t.effects(ctx)
	if err != nil {
		t.fail("reading the effects: %v", err)
	}
	views := make(map[string]*opView, len(t.keys))
	for _, k := range t.keys {
		views[k] = &opView{effects: effects[k]}
	}
	for _, e := range events {
		v := views[e.Op]
		if v == nil {
			t.fail("history names an operation %q the scenario never gave out", e.Op)
			continue
		}
		switch e.Type {
		case Invoke:
			res.Attempts++
		case OK:
			v.oks = append(v.oks, e)
			if e.Replay {
				res.Replays++
			}
		case Unknown:
			v.unknown++
		case Fail:
			switch e.Kind {
			case failLeaseLost:
				res.Fenced++
			case failExpired:
				res.Expired++
			}
		}
	}
	for k := range effects {
		if views[k] == nil {
			t.fail("an effect for %q, which no operation is", k)
		}
	}
	if !t.r.cfg.NoGuard && !t.noLedger {
		t.readStates(ctx, views)
	}

	var lost, mixed, stuck, unfinished, parkedBad []string
	for _, k := range t.keys {
		v := views[k]
		n := len(v.effects)
		res.Effects += n
		res.Duplicates += max(0, n-1)
		parked := v.state == idemtype.StateParked
		if parked {
			res.Parked++
		}
		if v.unknown > 0 || parked {
			res.Unknown++
		}
		if len(v.oks) > 0 && n == 0 && !t.effectsUnknown {
			lost = append(lost, k)
			if t.expectLoss {
				continue // its record went with it; not stuck, not unsettled
			}
		}
		if mixedUp(v, !t.countOnly) {
			mixed = append(mixed, k)
		}
		switch {
		case v.state == idemtype.StateInProgress:
			stuck = append(stuck, k)
		case len(v.oks) > 0:
			if v.hasState && v.state != idemtype.StateSucceeded && v.state != idemtype.StateTombstone {
				t.fail("%s was acknowledged ok but its record is %q", k, orNone(v.state))
			}
		case parked && !t.allowParked:
			parkedBad = append(parkedBad, k)
		case !parked:
			unfinished = append(unfinished, k)
		}
	}
	res.Lost, res.MixUps, res.Stuck, res.Unfinished = len(lost), len(mixed), len(stuck), len(unfinished)
	res.EffectsUnknown = t.effectsUnknown
	if t.counts != nil {
		t.counts(&res)
	}
	t.explain("duplicated", duplicated(t.keys, views))
	if t.expectLoss {
		t.explainLoss(lost)
	} else {
		t.explain("lost (acknowledged ok, no effect)", lost)
	}
	if t.expectLoss && len(mixed) > 0 {
		// A lost acknowledged enqueue is enqueued again as another job,
		// whose answer differs from the lost one's: the same loss.
		t.note("%d mixed up, by the loss (an acknowledged enqueue lost, the job enqueued again under another id): %s", len(mixed), strings.Join(mixed[:min(5, len(mixed))], ", "))
		res.MixUps = len(mixed)
		mixed = nil
	}
	t.explain("mixed up (acknowledged results differ from the effect)", mixed)
	t.explain("stuck in progress", stuck)
	t.explain("never settled", unfinished)
	t.explain("parked although the provider can deduplicate or be asked", parkedBad)

	t.mu.Lock()
	res.Failures, res.Notes = slices.Clone(t.failures), slices.Clone(t.notes)
	t.mu.Unlock()
	res.OK = res.Duplicates == 0 && (res.Lost == 0 && res.MixUps == 0 || t.expectLoss) && res.Stuck == 0 &&
		res.Unfinished == 0 && len(res.Failures) == 0
	return res
}

// readStates asks the ledger for every operation's record.
func (t *trial) readStates(ctx context.Context, views map[string]*opView) {
	for _, k := range t.keys {
		lk := t.ledgerKey(k)
		if lk == "" {
			continue // not a ledger operation (a job)
		}
		rec, err := t.r.ledger.Get(ctx, t.scope, lk)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			views[k].hasState = true
		case err != nil:
			t.fail("reading the record of %s: %v", k, err)
			return
		default:
			views[k].state, views[k].hasState = rec.State, true
		}
	}
}

// mixedUp reports whether an operation's acknowledged results disagree
// with each other or (withEffects) with the effect that happened.
func mixedUp(v *opView, withEffects bool) bool {
	for _, e := range v.oks {
		if e.Value != v.oks[0].Value {
			return true
		}
		if withEffects && len(v.effects) > 0 && !slices.Contains(v.effects, e.Value) {
			return true
		}
	}
	return false
}

func duplicated(keys []string, views map[string]*opView) []string {
	var out []string
	for _, k := range keys {
		if n := len(views[k].effects); n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", k, n))
		}
	}
	return out
}

// explain adds a failure naming the first few operations of a kind.
func (t *trial) explain(what string, ops []string) {
	if len(ops) == 0 {
		return
	}
	const show = 5
	list := strings.Join(ops[:min(show, len(ops))], ", ")
	if len(ops) > show {
		list += fmt.Sprintf(", … (%d more)", len(ops)-show)
	}
	t.fail("%d %s: %s", len(ops), what, list)
}

func orNone(s idemtype.State) string {
	if s == "" {
		return "none"
	}
	return string(s)
}

// explainLoss reports on a scenario that allows a loss: what it found,
// or, when it found none, that the run proved nothing either way (the
// loss is likely, not certain: no acknowledged commit may have been left
// only on the dead primary).
func (t *trial) explainLoss(lost []string) {
	if len(lost) == 0 {
		t.note("inconclusive: no acknowledged operation was lost this run, although the attack allowed it (raise --ops)")
		return
	}
	const show = 5
	t.note("%d acknowledged operations lost, as this configuration allows, and detected: %s", len(lost), strings.Join(lost[:min(show, len(lost))], ", "))
}
