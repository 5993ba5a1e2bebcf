package driver_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
)

// A paced sweep's pause goes on past its duty's share while the writes it
// gives way to are busy, and ends once they have been idle for Quiet.
func TestYieldWaitsForIdleWrites(t *testing.T) {
	t.Parallel()
	var idleSince atomic.Int64 // 0: busy
	y := driver.Yield{
		Floor:   1e-6, // a floor so low that only idleness ends the wait here
		Quiet:   5 * time.Millisecond,
		Longest: time.Hour,
		IdleFor: func() time.Duration {
			if s := idleSince.Load(); s != 0 {
				return time.Since(time.Unix(0, s))
			}
			return 0
		},
	}
	done := make(chan error, 1)
	go func() { done <- y.Wait(context.Background(), time.Now(), time.Millisecond, 0.5) }()
	time.Sleep(200 * time.Millisecond) // 200× the pause duty 0.5 asks for
	select {
	case err := <-done:
		t.Fatalf("the pause ended while the writes were busy (%v)", err)
	default:
	}
	idleSince.Store(time.Now().UnixNano())
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pause did not end once the writes were idle")
	}
}

// Under writes that are never idle the pause ends at the floor's share;
// duty 1 does not pause; a context that ends ends the pause with its error.
func TestYieldFloorAndCancel(t *testing.T) {
	t.Parallel()
	busy := driver.Yield{Floor: 0.5, Quiet: time.Millisecond, Longest: time.Hour, IdleFor: func() time.Duration { return 0 }}
	if err := busy.Wait(context.Background(), time.Now(), time.Millisecond, 0.9); err != nil {
		t.Fatal(err)
	}
	if err := busy.Wait(context.Background(), time.Now(), time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := busy.Wait(ctx, time.Now(), time.Hour, 0.5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pause: %v, want context.Canceled", err)
	}
}
