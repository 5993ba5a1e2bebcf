package metrics

import (
	"testing"
	"time"
)

func TestHistoryBucketsByStepAndForgets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	h := newHistory(5*time.Second, 4, func() time.Time { return now })
	h.add(func(s *Sample) { s.Reclaims++ })
	h.add(func(s *Sample) { s.Reclaims++ })
	now = now.Add(5 * time.Second)
	h.add(func(s *Sample) { s.Mismatches++ })
	now = now.Add(10 * time.Second) // one empty step in between

	got := h.samples()
	if len(got) != 4 {
		t.Fatalf("%d samples, want 4", len(got))
	}
	want := []Sample{{Reclaims: 2}, {Mismatches: 1}, {}, {}}
	for i := range want {
		w, g := want[i], got[i]
		g.At = time.Time{}
		if g != w {
			t.Errorf("sample %d = %+v, want %+v", i, got[i], w)
		}
		if i > 0 && got[i].At.Sub(got[i-1].At) != 5*time.Second {
			t.Errorf("sample %d at %v, previous %v: want 5s apart", i, got[i].At, got[i-1].At)
		}
	}
	// Four steps later the old counts have left the window, and a new
	// event reusing their slot starts from zero.
	now = now.Add(20 * time.Second)
	h.add(func(s *Sample) { s.LeasesLost++ })
	for i, s := range h.samples() {
		if s.Reclaims != 0 || s.Mismatches != 0 {
			t.Errorf("sample %d kept an old count: %+v", i, s)
		}
	}
	if last := h.samples()[3]; last.LeasesLost != 1 || !last.At.Equal(now.Truncate(5*time.Second)) {
		t.Errorf("last sample %+v, want one lost lease at %v", last, now.Truncate(5*time.Second))
	}
}
