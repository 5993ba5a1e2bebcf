package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
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

// firstAttemptFenced is a driver on which the heartbeats of a key's first
// attempt find the lease taken over; later attempts heartbeat as usual.
type firstAttemptFenced struct{ driver.Driver }

func (d firstAttemptFenced) Heartbeat(ctx context.Context, f driver.Fence, lease time.Duration) (time.Time, error) {
	if f.Attempt == 1 {
		return time.Time{}, driver.ErrFenced
	}
	return d.Driver.Heartbeat(ctx, f, lease)
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

// A lease-bound handler that answers after its lease was lost does not
// get its answer to the client: the key no longer says it (another
// attempt owns it), so the client gets 503 lease-lost and its retry what
// the key holds, here a second run of the handler.
func TestLeaseLostAnswerNotSent(t *testing.T) {
	t.Parallel()
	base := openLedger(t, "sqlite")
	// Only the first run's heartbeats are refused: the retry's run keeps
	// its lease however late a loaded machine lets it answer.
	l, err := idem.New(t.Context(), firstAttemptFenced{base.Driver()}, &idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that the retry's run, heartbeating every third of it,
	// keeps its lease on a machine loaded by -race and a full CI run (at
	// 200 ms it lost it once in CI: the retry got 503 lease-lost too).
	const lease = time.Second
	runs := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			<-r.Context().Done()      // the heartbeat found the lease lost
			time.Sleep(lease * 3 / 2) // and the lease has run out: answer anyway, late
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"charge":` + strconv.Itoa(runs) + `}`))
	})
	mw, err := idemhttp.New(l, &idemhttp.Options{Lease: lease, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mw(h)).URL
	r := do(t, "POST", url, `{}`, "Idempotency-Key: k")
	wantProblem(t, r, http.StatusServiceUnavailable, idemhttp.ProblemLeaseLost)
	if strings.Contains(r.body, "charge") {
		t.Fatalf("the late answer reached the client: %s", r.body)
	}
	// The retry finds the claim stale (its lease ended) and, under the
	// default policy, handles it again; the run answers in time now.
	var retry reply
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		retry = do(t, "POST", url, `{}`, "Idempotency-Key: k")
		if retry.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	if retry.status != http.StatusCreated || retry.body != `{"charge":2}` {
		t.Fatalf("retry: %d %s, want 201 from the second run", retry.status, retry.body)
	}
}
