package drivertest

import (
	"maps"
	"testing"

	"github.com/idemdev/idem/driver"
)

// testOffsets covers the optional Offsets interface: an offset stored in
// a rolled-back transaction is not there, one stored in a committed
// transaction is, and a smaller offset never moves it back.
func testOffsets(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(nil)
	drv, ok := l.Driver().(driver.Offsets)
	if !ok {
		t.Skipf("%s does not implement driver.Offsets", l.Driver().Name())
	}
	store := func(commit bool, topic string, p int32, next int64) {
		t.Helper()
		tx, end, err := l.Driver().Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer end()
		defer tx.Rollback()
		ex, err := l.Driver().Executor(tx)
		if err != nil {
			t.Fatal(err)
		}
		if err := drv.OffsetStore(f.ctx, ex, "g", topic, p, next); err != nil {
			t.Fatalf("OffsetStore(%s, %d, %d): %v", topic, p, next, err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	load := func(want map[string]map[int32]int64) {
		t.Helper()
		got, err := drv.OffsetsLoad(f.ctx, "g", []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, maps.Equal) {
			t.Fatalf("OffsetsLoad = %v, want %v", got, want)
		}
	}
	load(map[string]map[int32]int64{})
	store(false, "a", 0, 10)
	load(map[string]map[int32]int64{})
	store(true, "a", 0, 10)
	store(true, "a", 1, 3)
	store(true, "b", 7, 1)
	store(true, "c", 0, 99) // another topic, not asked for
	store(true, "a", 0, 4)  // behind: ignored
	if err := drv.OffsetStore(f.ctx, driver.Shared, "other", "a", 0, 50); err != nil {
		t.Fatalf("OffsetStore on Shared: %v", err)
	}
	load(map[string]map[int32]int64{"a": {0: 10, 1: 3}, "b": {7: 1}})
	store(true, "a", 0, 11)
	load(map[string]map[int32]int64{"a": {0: 11, 1: 3}, "b": {7: 1}})
}
