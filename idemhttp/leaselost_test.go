package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemhttp"
)

// fencedHeartbeat is a driver on which every heartbeat finds the lease
// taken over, as when another process reclaimed the key.
type fencedHeartbeat struct{ driver.Driver }

func (fencedHeartbeat) Heartbeat(context.Context, driver.Fence, time.Duration) (time.Time, error) {
	return time.Time{}, driver.ErrFenced
}

// A handler whose lease is lost sees its request context, and every
// context derived from it, cancelled with idem.ErrLeaseLost, while the
// control (Claim, Release) stays reachable through both.
func TestLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	base := openLedger(t, "sqlite")
	l, err := idem.New(t.Context(), fencedHeartbeat{base.Driver()}, &idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		claimed, derivedClaimed bool
		cause, derivedCause     error
	}
	got := make(chan seen, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		derived, cancel := context.WithCancel(r.Context())
		defer cancel()
		s := seen{claimed: idemhttp.Claim(r.Context()) != nil, derivedClaimed: idemhttp.Claim(derived) != nil}
		select {
		case <-derived.Done():
		case <-time.After(10 * time.Second):
		}
		s.cause, s.derivedCause = context.Cause(r.Context()), context.Cause(derived)
		got <- s
		http.Error(w, "lease lost", http.StatusServiceUnavailable)
	})
	mw, err := idemhttp.New(l, &idemhttp.Options{Lease: 30 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	do(t, "POST", serve(t, mw(h)).URL, `{}`, "Idempotency-Key: k")
	s := <-got
	if !s.claimed || !s.derivedClaimed {
		t.Errorf("Claim from the request context: %v, from a derived one: %v; want both", s.claimed, s.derivedClaimed)
	}
	if !errors.Is(s.cause, idem.ErrLeaseLost) || !errors.Is(s.derivedCause, idem.ErrLeaseLost) {
		t.Errorf("causes %v and %v, want idem.ErrLeaseLost for both", s.cause, s.derivedCause)
	}
}
