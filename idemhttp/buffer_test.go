package idemhttp

import "testing"

// getBuf hands out empty buffers: small ones of the size asked for, large
// ones of their size class, mapped or from the heap; putBuf and abandonBuf
// take either kind.
func TestGetBuf(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, minPooled, minPooled + 1, 1 << 20, 1<<20 + 1, 3 << 20} {
		b := getBuf(n)
		want := n
		if n > minPooled {
			want, _ = bufClass(n)
		}
		if len(b) != 0 || cap(b) != want {
			t.Errorf("getBuf(%d): len %d cap %d, want 0 and %d", n, len(b), cap(b), want)
		}
		b = append(b, make([]byte, n)...)
		putBuf(b)
	}
	putBuf(make([]byte, 0, 100<<10)) // a heap buffer of no class
	abandonBuf(make([]byte, 0, 1<<20))
	abandonBuf(nil)
	putBuf(nil)
}

func TestBufClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, size, idx int }{
		{minPooled + 1, 80 << 10, 0},
		{80 << 10, 80 << 10, 0},
		{80<<10 + 1, 96 << 10, 1},
		{128 << 10, 128 << 10, 3},
		{1 << 20, 1 << 20, 15},
	} {
		if size, idx := bufClass(c.n); size != c.size || idx != c.idx {
			t.Errorf("bufClass(%d) = %d, %d; want %d, %d", c.n, size, idx, c.size, c.idx)
		}
	}
}
