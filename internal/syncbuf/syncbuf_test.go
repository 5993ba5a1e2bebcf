package syncbuf

import (
	"sync"
	"testing"
)

// Tail keeps the last Max bytes of writes from many goroutines, and
// reports every write as whole.
func TestTail(t *testing.T) {
	tl := &Tail{Max: 10}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if n, err := tl.Write([]byte("abc")); n != 3 || err != nil {
					t.Errorf("Write = %d, %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	tl.Write([]byte("  0123456789xyz \n"))
	if got := tl.String(); got != "56789xyz" {
		t.Fatalf("String() = %q, want the last 10 bytes trimmed", got)
	}
	if got := (&Tail{Max: 4}).String(); got != "" {
		t.Fatalf("empty Tail: %q", got)
	}
}
