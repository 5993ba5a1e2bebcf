package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/groupcommit"
)

// A paced prune gives way to the ledger's writes: the driver counts a
// write as live from its submission to its answer, and idle only after.
// A full batch then pauses (giving way) and the sweep goes on to the end.
func TestPacedPruneSeesLiveWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)

	wrote := make(chan error, 1)
	go func() {
		wrote <- d.write(ctx, driver.Shared, &groupcommit.Write{Key: "slow", Query: `SELECT pg_sleep(0.5)`,
			Exec: func(int64) error { return nil }})
	}()
	for i := 0; d.writes.inFlight.Load() == 0; i++ {
		if i > 10_000 {
			t.Fatal("a write in flight was not counted")
		}
		time.Sleep(time.Millisecond)
	}
	if idle := d.writes.idleFor(); idle != 0 {
		t.Errorf("idle for %v while a write was in flight", idle)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if idle := d.writes.idleFor(); idle <= 0 {
		t.Errorf("idle for %v after the write was answered", idle)
	}

	const n, batch = 250, 100
	if _, err := d.FillCompleted(ctx, driver.FillParams{N: n, Scope: "s", Scopes: 3, Body: []byte(`{}`),
		Retention: time.Minute, TombstoneTTL: time.Minute, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 4 {
		c, err := d.PrunePaced(ctx, batch, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.Deleted)
	}
	if want := []int{100, 100, 50, 0}; !slices.Equal(got, want) {
		t.Errorf("paced batches deleted %v, want %v", got, want)
	}
}
