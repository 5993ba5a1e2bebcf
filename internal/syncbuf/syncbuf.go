// Package syncbuf is a bytes.Buffer that goroutines may write and read at
// once: the sink for a child process's stderr or a logger that a test
// reads while the code under test still writes.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Tail keeps the last Max bytes written to it, guarded by a mutex: the end
// of a long-running child's stderr, for an error message.
type Tail struct {
	// Max is how many bytes it keeps.
	Max int

	mu sync.Mutex
	b  []byte
}

// Write appends p, dropping what is older than the last Max bytes.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.Max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept, without leading and trailing space.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
