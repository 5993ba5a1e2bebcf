package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"pgregory.net/rapid"
)

// runModel is what a booking's run should have done so far.
type runModel struct {
	rideDone, chargeStarted, chargeDone, receiptDone bool
	charged                                          bool // the provider holds the charge
	calls                                            int  // provider calls
	state                                            idemtype.State
	released                                         bool // an operator released the parked run
}

// TestRunModel drives one booking per check through random attempts, each
// failing at a random point (before or after the provider call, at the
// receipt) with a random lookup (the provider's, one that always says
// "not done", one that cannot tell, none), and operator releases of parked
// runs, and compares effects and record with a model after every action.
func TestRunModel(t *testing.T) {
	eachRunDriver(t, func(t *testing.T, f *runFixture) {
		n := 0
		rapid.Check(t, func(rt *rapid.T) {
			n++
			key := fmt.Sprintf("model-%d", n)
			op := idem.Op{Key: key, Fingerprint: "fp"}
			m := &runModel{}
			ctx := context.Background()
			rt.Repeat(map[string]func(*rapid.T){
				"attempt": func(rt *rapid.T) {
					fail := rapid.SampledFrom([]string{"none", "before-charge", "after-charge", "receipt"}).Draw(rt, "fail")
					lookup := rapid.SampledFrom([]string{"provider", "redo", "unknown", "none"}).Draw(rt, "lookup")
					h := hooks{}
					switch fail {
					case "before-charge":
						h.beforeCharge = func() error { return errFlaky }
					case "after-charge":
						h.afterCharge = func() error { return errFlaky }
					case "receipt":
						h.receipt = func() error { return errFlaky }
					}
					switch lookup {
					case "redo":
						h.lookupOverwrite = func(context.Context, string) (string, idem.Verdict, error) { return "ch", idem.VerdictNotDone, nil }
					case "unknown":
						h.lookupOverwrite = func(context.Context, string) (string, idem.Verdict, error) { return "", idem.VerdictUnknown, nil }
					case "none":
						h.noLookup = true
					}
					_, err := f.l.Run(ctx, op, book(f.l, op, h))
					want := m.attempt(fail, lookup)
					if !errors.Is(err, want) {
						rt.Fatalf("attempt (fail %s, lookup %s): %v, want %v", fail, lookup, err, want)
					}
				},
				"release": func(rt *rapid.T) {
					if m.state != idemtype.StateParked {
						rt.Skip("not parked")
					}
					if _, err := f.l.Resolve(ctx, "", key, idem.Resolution{As: idemtype.StateReleased}); err != nil {
						rt.Fatal(err)
					}
					m.state, m.released = idemtype.StateReleased, true
				},
				"": func(rt *rapid.T) {
					rides, receipts, charges, calls := effects(rt, f.l, key)
					if rides != b2i(m.rideDone) || receipts != b2i(m.receiptDone) || charges != b2i(m.charged) || calls != m.calls {
						rt.Fatalf("effects: %d rides, %d receipts, %d charges, %d calls; model %+v", rides, receipts, charges, calls, *m)
					}
					if rides > 1 || receipts > 1 || charges > 1 {
						rt.Fatal("an effect happened twice")
					}
					if m.state != "" {
						rec, err := f.l.Get(ctx, "", key)
						if err != nil || rec.State != m.state {
							rt.Fatalf("record %s, %v; model %s", rec.State, err, m.state)
						}
					}
				},
			})
		})
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// attempt applies one attempt to the model and returns the error it should
// end with.
func (m *runModel) attempt(fail, lookup string) error {
	switch m.state {
	case idemtype.StateSucceeded:
		return nil
	case idemtype.StateFailed:
		return idem.ErrFailed
	case idemtype.StateParked:
		return idem.ErrParked
	}
	released := m.released
	m.released = false
	m.rideDone = true
	m.state = idemtype.StateInProgress
	if !m.chargeDone {
		call := true
		if m.chargeStarted && !released {
			switch lookup {
			case "provider":
				if m.charged {
					m.chargeDone, call = true, false
				}
			case "unknown", "none":
				m.state = idemtype.StateParked
				return idem.ErrParked
			}
		}
		if call {
			m.chargeStarted = true
			if fail == "before-charge" {
				return errFlaky
			}
			m.charged = true
			m.calls++
			if fail == "after-charge" {
				return errFlaky
			}
			m.chargeDone = true
		}
	}
	if fail == "receipt" {
		return errFlaky
	}
	m.receiptDone = true
	m.state = idemtype.StateSucceeded
	return nil
}
