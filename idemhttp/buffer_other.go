//go:build !linux

package idemhttp

// arena maps no buffers outside Linux: every large buffer comes from the
// heap pools (see buffer.go).
type arena struct{}

var mapped arena

func (*arena) get(size, idx int) []byte { return nil }
func (*arena) put(b []byte) bool        { return false }
func (*arena) abandon(b []byte)         {}
