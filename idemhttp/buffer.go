package idemhttp

import (
	"math/bits"
	"sync"
)

// Buffers of held responses larger than minPooled come from size classes
// and go back once the response is sent and recorded: with many large
// responses in flight, a new buffer for each would leave one response's
// worth of garbage behind per request, and the collector lets the heap
// grow to twice what is live before it runs.
//
// On Linux they are mapped outside the Go heap (buffer_linux.go), so that
// they do not count towards the collector's heap goal either: the heap
// stays small, its garbage (a driver's copy of each body) is collected
// early, and the process holds about its idle size plus the responses in
// flight. Elsewhere, or when mapping fails, they come from a sync.Pool per
// class on the heap.
//
// Ownership: a buffer from getBuf belongs to the one recorder that got it,
// and is read, while it holds it, by the client's connection (send, pass)
// and by the ledger's write of the stored response. Its life ends exactly
// once, in release, grow or discard:
//
//   - putBuf, once nothing can read it any more: the answer is sent (or
//     will never be) and every ledger call that was given the body has
//     returned with an answer. It may be reused, or unmapped, at once.
//   - abandonBuf, when a ledger call ended without an answer (its context
//     ended after the write was queued, or a failure that may leave it
//     queued): a group committer may still read the body later, so the
//     buffer is never reused or unmapped. On the heap the collector frees
//     it when the last reference goes; a mapped buffer stays mapped for
//     good, and past maxAbandoned bytes of those new buffers come from the
//     heap.
//
// Nothing may keep a reference to the buffer past the end of its life:
// the ledger and the drivers do not keep a Result's Body once its write
// is answered.
const (
	minPooled   = 64 << 10
	minClassLog = 14 // bits.Len of minPooled, less 3 (see bufClass)
	maxClasses  = 4 * (64 - minClassLog)
)

var heapPools [maxClasses]sync.Pool

// bufClass rounds n (> minPooled) up to its size class, a quarter power
// of two (5, 6, 7 or 8 × 2^k), so that a buffer wastes less than a quarter
// of its size, and returns the class's index.
func bufClass(n int) (size, idx int) {
	k := bits.Len(uint(n-1)) - 3
	m := (n-1)>>k + 1 // 5..8
	return m << k, 4*(k-minClassLog) + m - 5
}

// getBuf returns an empty buffer with room for n bytes: for a large n, a
// mapped or pooled one of n's size class.
func getBuf(n int) []byte {
	if n <= minPooled {
		return make([]byte, 0, n)
	}
	size, idx := bufClass(n)
	if b := mapped.get(size, idx); b != nil {
		return b
	}
	if p, ok := heapPools[idx].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, size)
}

// putBuf ends the life of b, one of getBuf's buffers, when nothing can
// read it any more (see Ownership above): a large one is kept for reuse
// or unmapped.
func putBuf(b []byte) {
	if cap(b) <= minPooled {
		return
	}
	if mapped.put(b) {
		return
	}
	if size, idx := bufClass(cap(b)); size == cap(b) {
		putHeap(b[:0], idx)
	}
}

// putHeap keeps b in its class's pool; apart from putBuf, so that only
// large buffers pay for the pointer the pool keeps (b escapes).
func putHeap(b []byte, idx int) { heapPools[idx].Put(&b) }

// abandonBuf ends the recorder's hold on b when a write the ledger did
// not answer may still read it: b is never reused (see Ownership above).
func abandonBuf(b []byte) {
	if cap(b) > minPooled {
		mapped.abandon(b)
	}
}
