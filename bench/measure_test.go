package bench

import (
	"context"
	"testing"
	"time"
)

// An operation longer than the window is counted for its share of the
// window, not dropped: 32 workers whose every operation spans the whole
// window make about 32 × d/took operations there, never none.
func TestClosedLoopCountsLongOperations(t *testing.T) {
	const (
		d    = 50 * time.Millisecond
		took = 4 * d
	)
	op := one(func(ctx context.Context, w int, seq int64) error {
		time.Sleep(took)
		return nil
	})
	st, err := closedLoop(context.Background(), 32, time.Millisecond, d, op)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops == 0 {
		t.Fatalf("operations of %v in a window of %v counted as none", took, d)
	}
	if st.P99 < took {
		t.Fatalf("p99 %v, want at least the %v every operation took", st.P99, took)
	}
	t.Logf("%d operations counted in the window (about %d expected)", st.Ops, 32*int(d)/int(took))
}
