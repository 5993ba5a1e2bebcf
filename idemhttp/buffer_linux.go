//go:build linux

package idemhttp

import (
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// arena holds the large response buffers mapped outside the Go heap
// (anonymous private mappings), by size class (see buffer.go).
type arena struct {
	maxFree      int           // bytes of free buffers kept mapped for reuse; more are unmapped
	maxAbandoned int           // bytes of abandoned buffers past which get maps no more
	trimEvery    time.Duration // how often, at most, trim runs after a collection; 0: never

	mu        sync.Mutex
	chunks    map[uintptr]chunkState // every mapped buffer, by its address
	free      [maxClasses][][]byte
	freeBytes int
	abandoned int
	low       [maxClasses]int // fewest free buffers of each class since the last trim
	trimmed   time.Time
	armed     sync.Once // the first mapping arms trim
}

type chunkState uint8

const (
	chunkHeld      chunkState = iota + 1 // a recorder holds it
	chunkFree                            // in a free list
	chunkAbandoned                       // a write may still read it: mapped for good, never reused
)

// mapped keeps the free buffers for the next requests, up to 256 MiB
// (the gateway's default bound on what requests in flight hold), and
// unmaps those no request needed for a whole trimEvery (checked after a
// collection, which an idle process runs at least every two minutes). It
// stops mapping once 64 MiB were abandoned to writes the ledger never
// answered (a database outage), falling back to the heap, which frees
// such buffers.
var mapped = &arena{maxFree: 256 << 20, maxAbandoned: 64 << 20, trimEvery: 10 * time.Second}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// get returns an empty mapped buffer of the class idx (size bytes): a
// free one, or a new mapping. It returns nil when it maps no more, or the
// mapping failed: the caller takes one from the heap.
func (a *arena) get(size, idx int) []byte {
	a.mu.Lock()
	if a.abandoned >= a.maxAbandoned {
		a.mu.Unlock()
		return nil
	}
	if n := len(a.free[idx]); n > 0 {
		b := a.free[idx][n-1]
		a.free[idx][n-1] = nil
		a.free[idx] = a.free[idx][:n-1]
		a.low[idx] = min(a.low[idx], n-1)
		a.freeBytes -= cap(b)
		a.chunks[addr(b)] = chunkHeld
		a.mu.Unlock()
		return b
	}
	a.mu.Unlock()
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil
	}
	a.mu.Lock()
	if a.chunks == nil {
		a.chunks = make(map[uintptr]chunkState)
	}
	a.chunks[addr(b)] = chunkHeld
	a.mu.Unlock()
	if a.trimEvery > 0 {
		a.armed.Do(a.armTrim)
	}
	return b[:0]
}

// put takes back b if it is a mapped buffer (and reports whether it is):
// into its free list, or unmapped when the free lists are full. Nothing
// may read b afterwards.
func (a *arena) put(b []byte) bool {
	p := addr(b)
	a.mu.Lock()
	switch a.chunks[p] {
	case 0:
		a.mu.Unlock()
		return false // from the heap
	case chunkHeld:
	default:
		a.mu.Unlock()
		panic("idemhttp: a response buffer's life ended twice")
	}
	if a.freeBytes+cap(b) <= a.maxFree {
		_, idx := bufClass(cap(b))
		a.chunks[p] = chunkFree
		a.free[idx] = append(a.free[idx], b[:0])
		a.freeBytes += cap(b)
		a.mu.Unlock()
		return true
	}
	delete(a.chunks, p)
	a.mu.Unlock()
	if err := syscall.Munmap(b[:cap(b)]); err != nil {
		panic("idemhttp: unmapping a response buffer: " + err.Error())
	}
	return true
}

// abandon leaves b mapped for good if it is a mapped buffer: a write may
// still read it.
func (a *arena) abandon(b []byte) {
	p := addr(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.chunks[p] {
	case 0:
		return
	case chunkHeld:
		a.chunks[p] = chunkAbandoned
		a.abandoned += cap(b)
	default:
		panic("idemhttp: a response buffer's life ended twice")
	}
}

// armTrim has tick run after the next collection (and so on after each).
func (a *arena) armTrim() {
	runtime.AddCleanup(new([16]byte), func(a *arena) { a.tick() }, a)
}

func (a *arena) tick() {
	a.mu.Lock()
	due := time.Since(a.trimmed) >= a.trimEvery
	a.mu.Unlock()
	if due {
		a.trim()
	}
	a.armTrim()
}

// trim unmaps the free buffers that no get took since the last trim (the
// bottom of each free list, down to its low-water mark).
func (a *arena) trim() {
	var idle [][]byte
	a.mu.Lock()
	a.trimmed = time.Now()
	for idx := range a.free {
		k := a.low[idx]
		for _, b := range a.free[idx][:k] {
			idle = append(idle, b)
			delete(a.chunks, addr(b))
			a.freeBytes -= cap(b)
		}
		a.free[idx] = append(a.free[idx][:0], a.free[idx][k:]...)
		clear(a.free[idx][len(a.free[idx]):cap(a.free[idx])])
		a.low[idx] = len(a.free[idx])
	}
	a.mu.Unlock()
	for _, b := range idle {
		if err := syscall.Munmap(b[:cap(b)]); err != nil {
			panic("idemhttp: unmapping a response buffer: " + err.Error())
		}
	}
}
