package keepalive

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const lease = 3 * time.Second // heartbeats every second

var errFenced = errors.New("fenced")
var errDown = errors.New("database unreachable")

// fake is a heartbeat whose answers the test scripts, and a record of
// what the loop did, all on synctest's fake clock.
type fake struct {
	mu     sync.Mutex
	answer func(ctx context.Context) error // nil answers nil
	beats  []time.Time
	lost   []error
	lostAt time.Time
	failed int
}

func (f *fake) setAnswer(a func(ctx context.Context) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

// viaLoop makes fake.start run a Loop with the fake as its Holder, not
// Start with a Config (TestLoopWithHolder).
var viaLoop bool

func (f *fake) start(ctx context.Context, granted time.Time) (stop func()) {
	if viaLoop {
		lp := new(Loop)
		lp.Start(ctx, lease, granted, f)
		return lp.Stop
	}
	return Start(ctx, Config{
		Lease:   lease,
		Granted: granted,
		Heartbeat: func(ctx context.Context) error {
			f.mu.Lock()
			f.beats = append(f.beats, time.Now())
			a := f.answer
			f.mu.Unlock()
			if a == nil {
				return nil
			}
			return a(ctx)
		},
		Fenced: func(err error) bool { return errors.Is(err, errFenced) },
		Lost: func(cause error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.lost = append(f.lost, cause)
			f.lostAt = time.Now()
		},
		Failed: func(error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.failed++
		},
	})
}

// The fake as a Holder: the same as the Config start makes.
func (f *fake) Heartbeat(ctx context.Context) error {
	f.mu.Lock()
	f.beats = append(f.beats, time.Now())
	a := f.answer
	f.mu.Unlock()
	if a == nil {
		return nil
	}
	return a(ctx)
}

func (f *fake) Fenced(err error) bool { return errors.Is(err, errFenced) }

func (f *fake) Lost(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = append(f.lost, cause)
	f.lostAt = time.Now()
}

func (f *fake) Failed(error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed++
}

func (f *fake) counts() (beats, lost, failed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.beats), len(f.lost), f.failed
}

func fail(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

// A healthy lease is heartbeated every third of it, and never lost.
func TestHeartbeatsEveryThirdOfTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		start := time.Now()
		stop := f.start(t.Context(), time.Time{})
		time.Sleep(10*lease + lease/6)
		stop()
		if beats, lost, _ := f.counts(); beats != 30 || lost != 0 {
			t.Fatalf("%d heartbeats, %d losses in 10 leases; want 30 and 0", beats, lost)
		}
		for i, at := range f.beats {
			if want := start.Add(time.Duration(i+1) * lease / 3); !at.Equal(want) {
				t.Fatalf("heartbeat %d at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
	})
}

// A fenced heartbeat ends the loop at once, telling the holder why.
func TestFencedHeartbeatLosesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		stop := f.start(t.Context(), time.Time{})
		defer stop()
		time.Sleep(lease / 2) // one good heartbeat
		f.setAnswer(fail(errFenced))
		time.Sleep(lease)
		synctest.Wait()
		beats, lost, _ := f.counts()
		if beats != 2 || lost != 1 || !errors.Is(f.lost[0], errFenced) {
			t.Fatalf("%d heartbeats, losses %v; want 2 heartbeats and one loss by fencing", beats, f.lost)
		}
	})
}

// Failing heartbeats are retried while the lease may still hold; once no
// heartbeat has succeeded for a whole lease since the last good one was
// sent, the lease is given up: exactly then, not before.
func TestUnconfirmedForALeaseLosesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		start := time.Now()
		stop := f.start(t.Context(), time.Time{})
		defer stop()
		time.Sleep(lease/3 + lease/6) // the heartbeat at lease/3 succeeded
		f.setAnswer(fail(errDown))
		time.Sleep(lease - lease/6 - time.Millisecond) // just short of a lease after it
		synctest.Wait()
		if _, lost, failed := f.counts(); lost != 0 || failed != 2 {
			t.Fatalf("%d losses, %d failures short of a lease; want 0 and 2", lost, failed)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		_, lost, failed := f.counts()
		if lost != 1 || failed != 2 || !errors.Is(f.lost[0], ErrUnconfirmed) || !errors.Is(f.lost[0], errDown) {
			t.Fatalf("losses %v, %d failures; want one ErrUnconfirmed wrapping the last error", f.lost, failed)
		}
		if want := start.Add(lease/3 + lease); !f.lostAt.Equal(want) {
			t.Fatalf("lost at %v, want %v (a lease after the last good heartbeat)", f.lostAt.Sub(start), want.Sub(start))
		}
	})
}

// A success between failures restarts the count.
func TestSuccessRenewsTrust(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		stop := f.start(t.Context(), time.Time{})
		defer stop()
		f.setAnswer(fail(errDown))
		time.Sleep(lease*2/3 + lease/6) // two failures
		f.setAnswer(nil)
		time.Sleep(lease / 3) // one success
		f.setAnswer(fail(errDown))
		time.Sleep(lease * 2 / 3) // two more failures, still within a lease of the success
		synctest.Wait()
		if _, lost, failed := f.counts(); lost != 0 || failed != 4 {
			t.Fatalf("%d losses, %d failures; want 0 and 4", lost, failed)
		}
	})
}

// The lease counts from when it was granted, not from Start: a claim that
// took long to answer leaves less time.
func TestGrantedCountsFromTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{answer: fail(errDown)}
		start := time.Now()
		stop := f.start(t.Context(), start.Add(-2*lease/3))
		defer stop()
		time.Sleep(lease)
		synctest.Wait()
		if _, lost, _ := f.counts(); lost != 1 || !f.lostAt.Equal(start.Add(lease/3)) {
			t.Fatalf("%d losses, at %v; want one at %v", lost, f.lostAt.Sub(start), lease/3)
		}
	})
}

// A heartbeat that hangs is cut off at the end of the lease, which is then
// given up.
func TestHungHeartbeatCannotHideALostLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{answer: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		start := time.Now()
		stop := f.start(t.Context(), time.Time{})
		defer stop()
		time.Sleep(2 * lease)
		synctest.Wait()
		if _, lost, _ := f.counts(); lost != 1 || !f.lostAt.Equal(start.Add(lease)) {
			t.Fatalf("%d losses, at %v; want one at %v", lost, f.lostAt.Sub(start), lease)
		}
	})
}

// stop cancels a heartbeat under way, waits for the loop, never reports a
// loss, and may be called twice; no heartbeat follows it.
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		var cancelled bool
		f.setAnswer(func(ctx context.Context) error {
			<-ctx.Done()
			cancelled = true
			return ctx.Err()
		})
		stop := f.start(t.Context(), time.Time{})
		time.Sleep(lease/3 + time.Millisecond) // a heartbeat is hanging
		stop()
		if !cancelled {
			t.Fatal("stop returned before the heartbeat under way ended")
		}
		stop()
		time.Sleep(3 * lease)
		if beats, lost, failed := f.counts(); beats != 1 || lost != 0 || failed != 0 {
			t.Fatalf("after stop: %d heartbeats, %d losses, %d failures; want 1, 0, 0", beats, lost, failed)
		}
	})
}

// Ending the context ends the loop, without a loss.
func TestContextEndsTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{answer: fail(errDown)}
		ctx, cancel := context.WithCancel(t.Context())
		stop := f.start(ctx, time.Time{})
		defer stop()
		time.Sleep(lease / 2)
		cancel()
		time.Sleep(3 * lease)
		if beats, lost, _ := f.counts(); beats != 1 || lost != 0 {
			t.Fatalf("%d heartbeats, %d losses; want 1 and 0", beats, lost)
		}
	})
}

// A heartbeat slower than a tick, but within the lease, still renews it:
// the loop waits for it rather than cutting it off. (Not lease/2: two
// back-to-back calls would then end exactly at the first one's deadline,
// and which of two timers at one instant fires first is not defined.)
func TestSlowHeartbeatStillCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{answer: func(ctx context.Context) error {
			select {
			case <-time.After(2 * lease / 5):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
		stop := f.start(t.Context(), time.Time{})
		time.Sleep(10 * lease)
		stop()
		if beats, lost, failed := f.counts(); beats < 10 || lost != 0 || failed != 0 {
			t.Fatalf("%d heartbeats, %d losses, %d failures in 10 leases; want ≥10, 0, 0", beats, lost, failed)
		}
	})
}

// A Loop with a Holder behaves as Start with a Config: every test again,
// through the fake's methods.
func TestLoopWithHolder(t *testing.T) {
	viaLoop = true
	defer func() { viaLoop = false }()
	for name, test := range map[string]func(*testing.T){
		"Heartbeats": TestHeartbeatsEveryThirdOfTheLease, "Fenced": TestFencedHeartbeatLosesTheLease,
		"Unconfirmed": TestUnconfirmedForALeaseLosesTheLease, "Renews": TestSuccessRenewsTrust,
		"Granted": TestGrantedCountsFromTheClaim, "Hung": TestHungHeartbeatCannotHideALostLease,
		"Stop": TestStop, "Context": TestContextEndsTheLoop, "Slow": TestSlowHeartbeatStillCounts,
	} {
		t.Run(name, test)
	}
}

// A Loop kept in its holder's state costs its first tick's timer and
// nothing else, for a holder done before that tick.
func TestLoopAllocations(t *testing.T) {
	type state struct {
		fake
		lp Loop
	}
	n := testing.AllocsPerRun(100, func() {
		s := new(state)
		s.lp.Start(context.Background(), time.Hour, time.Time{}, &s.fake)
		s.lp.Stop()
	})
	if n > 3 { // the state, the timer, the timer's function
		t.Errorf("%v allocations to start and stop a Loop, want 3", n)
	}
}
