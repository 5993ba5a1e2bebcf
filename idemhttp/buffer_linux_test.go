//go:build linux

package idemhttp

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

const mib = 1 << 20

// A buffer given back is the next one of its class handed out; one
// abandoned (a write may still read it) never is, and stays readable.
func TestArenaReuse(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: 4 * mib, maxAbandoned: 4 * mib}
	size, idx := bufClass(mib)
	b := a.get(size, idx)
	if b == nil || len(b) != 0 || cap(b) != size {
		t.Fatalf("get: len %d cap %d, want an empty %d-byte buffer", len(b), cap(b), size)
	}
	b = append(b, bytes.Repeat([]byte("x"), mib)...)
	if !a.put(b) {
		t.Fatal("put: a mapped buffer not taken back")
	}
	c := a.get(size, idx)
	if addr(c) != addr(b) {
		t.Fatal("a free buffer was not reused")
	}
	a.abandon(c)
	for range 3 {
		d := a.get(size, idx)
		if addr(d) == addr(c) {
			t.Fatal("an abandoned buffer was handed out again")
		}
		a.put(d)
	}
	if c = c[:mib]; c[mib-1] != 'x' {
		t.Fatal("an abandoned buffer changed")
	}
	if a.abandoned != size {
		t.Fatalf("abandoned %d bytes, want %d", a.abandoned, size)
	}
}

// Past maxFree a buffer given back is unmapped; past maxAbandoned get
// maps no more, and buffers come from the heap.
func TestArenaBounds(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: mib, maxAbandoned: mib}
	size, idx := bufClass(mib)
	b1, b2 := a.get(size, idx), a.get(size, idx)
	a.put(b1)
	a.put(b2)
	if a.freeBytes != size || len(a.chunks) != 1 {
		t.Fatalf("%d free bytes in %d mappings, want %d in 1", a.freeBytes, len(a.chunks), size)
	}
	if a.put(make([]byte, 0, size)) {
		t.Fatal("put took a heap buffer")
	}
	a.abandon(a.get(size, idx))
	if b := a.get(size, idx); b != nil {
		t.Fatal("get mapped a buffer past maxAbandoned")
	}
}

// Giving a buffer back twice is a bug that would hand one buffer to two
// requests: it panics.
func TestArenaDoublePut(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: 4 * mib, maxAbandoned: 4 * mib}
	size, idx := bufClass(mib)
	b := a.get(size, idx)
	a.put(b)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	a.abandon(b)
}

// trim unmaps the free buffers no get needed since the last trim, and
// keeps those that were.
func TestArenaTrim(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: 8 * mib, maxAbandoned: 8 * mib}
	size, idx := bufClass(mib)
	var bs [][]byte
	for range 4 {
		bs = append(bs, a.get(size, idx))
	}
	for _, b := range bs {
		a.put(b)
	}
	a.trim() // sets the low-water mark: nothing was free before
	if len(a.chunks) != 4 {
		t.Fatalf("%d mappings after the first trim, want 4", len(a.chunks))
	}
	a.put(a.get(size, idx)) // one of the four is in use again
	a.trim()
	if len(a.chunks) != 1 || a.freeBytes != size {
		t.Fatalf("%d mappings, %d free bytes after trimming the idle ones, want 1 and %d", len(a.chunks), a.freeBytes, size)
	}
}

// Many recorders at once never share a buffer.
func TestArenaConcurrent(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: 4 * mib, maxAbandoned: 4 * mib}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			n := 100<<10 + g*40<<10
			size, idx := bufClass(n)
			for i := range 50 {
				b := a.get(size, idx)
				if b == nil {
					b = make([]byte, 0, size)
				}
				b = append(b, bytes.Repeat([]byte{byte(g)}, n)...)
				if bytes.Count(b, []byte{byte(g)}) != n {
					t.Errorf("goroutine %d: its buffer was written by another", g)
				}
				if i%10 == 9 && g == 0 {
					a.abandon(b)
				} else {
					a.put(b)
				}
			}
		})
	}
	wg.Wait()
}

// A recorder whose completion went unanswered abandons its buffer, which
// getBuf then never hands out again; otherwise it gives it back.
func TestRecorderRetainedBuffer(t *testing.T) {
	t.Parallel()
	r := &recorder{limit: 4 * mib, spillErr: os.ErrPermission} // the spill file failed
	r.buf = append(getBuf(mib), 'x')
	held := addr(r.buf)
	if body, err := r.load(t.Context()); err != nil || addr(body) != held {
		t.Fatalf("load: %v, or not the held buffer", err)
	}
	r.retain()
	r.stored()
	r.release()
	r.release() // again: nothing
	if r.buf != nil {
		t.Fatal("release kept the buffer")
	}
	for range 3 {
		b := getBuf(mib)
		if addr(b) == held {
			t.Fatal("a retained buffer was reused")
		}
		defer putBuf(b)
	}
}

// A spilled body is read back into a buffer of its own for the ledger:
// abandoned when the write went unanswered, while the recorder's own
// buffer goes back; and the room it took in storing is given back.
func TestRecorderRetainedLoadedCopy(t *testing.T) { // not parallel: it looks at the process's storing
	r := newRecorder(httptest.NewRecorder(), 4*mib, t.TempDir(), true)
	defer r.close()
	body := bytes.Repeat([]byte("0123456789abcdef"), mib/16)
	if _, err := r.Write(body); err != nil {
		t.Fatal(err)
	}
	if r.spill == nil || len(r.buf) != spillAt || r.spilled != int64(mib-spillAt) {
		t.Fatalf("held %d bytes in memory, %d in a file (%v); want %d and %d", len(r.buf), r.spilled, r.spill != nil, spillAt, mib-spillAt)
	}
	loaded, err := r.load(t.Context())
	if err != nil || !bytes.Equal(loaded, body) {
		t.Fatalf("load: %v, or not the body written", err)
	}
	copied := addr(loaded)
	r.retain()
	r.stored()
	if !storing.TryAcquire(storingBytes) {
		t.Fatal("stored kept its room in storing")
	}
	storing.Release(storingBytes)
	r.release()
	for range 3 {
		b := getBuf(mib)
		if addr(b) == copied {
			t.Fatal("a retained copy was reused")
		}
		defer putBuf(b)
	}
}

// After collections, once trimEvery passed, the free buffers nobody took
// are unmapped without a call into the arena.
func TestArenaTrimsAfterCollections(t *testing.T) {
	t.Parallel()
	a := &arena{maxFree: 8 * mib, maxAbandoned: 8 * mib, trimEvery: time.Nanosecond}
	size, idx := bufClass(mib)
	a.put(a.get(size, idx))
	mappings := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.chunks)
	}
	for i := 0; i < 1000 && mappings() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := mappings(); n != 0 {
		t.Fatalf("%d mappings left after 1000 collections", n)
	}
}

// A spill file that stops taking writes (a full disk) is read back, and
// the rest of the body is held in memory: nothing written is lost.
func TestRecorderSpillFails(t *testing.T) {
	t.Parallel()
	r := newRecorder(httptest.NewRecorder(), 4*mib, t.TempDir(), true)
	defer r.close()
	body := bytes.Repeat([]byte("0123456789abcdef"), mib/16)
	if _, err := r.Write(body[:100<<10]); err != nil || r.spill == nil {
		t.Fatalf("first write: %v; spilled: %v", err, r.spill != nil)
	}
	// The same file, open for reading only: writes fail from now on.
	ro, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", r.spill.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.spill.Close()
	r.spill = ro
	for b := body[100<<10:]; len(b) > 0; {
		n := min(len(b), 32<<10)
		if _, err := r.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if r.spill != nil || r.spillErr == nil || !bytes.Equal(r.buf, body) {
		t.Fatalf("held %d bytes in memory (file still open: %v), want the whole %d", len(r.buf), r.spill != nil, len(body))
	}
}
