package fingerprint

import (
	"errors"
)

// Canonicalize parses data as strict JSON, applies opts and returns the RFC
// 8785 canonical form: no white space, object members sorted by the UTF-16
// code units of their keys, numbers as ECMAScript prints them (1.0 is 1, 2e21
// is 2e+21, -0 is 0) and strings with only '"', '\\' and U+0000 to U+001F
// escaped. A number RFC 8785 would round to another value is written as its
// exact decimal instead (9007199254740993 stays 9007199254740993, 1e400 is
// 1e+400): see the package documentation.
//
// Input that is not strict JSON or has no canonical form is never repaired:
// Canonicalize returns a *SyntaxError (see the package documentation for
// what is rejected). An invalid Exclude pointer gives an error wrapping
// ErrInvalidPointer.
func Canonicalize(data []byte, opts ...Option) ([]byte, error) {
	c, ptrs, err := compile(opts)
	if err != nil {
		return nil, err
	}
	return c.appendCanonical(make([]byte, 0, len(data)), data, ptrs)
}

// compile applies opts and parses their Exclude pointers.
func compile(opts []Option) (*config, []pointer, error) {
	c := newConfig(opts)
	ptrs := make([]pointer, 0, len(c.exclude))
	for _, s := range c.exclude {
		norm := (func(string) string)(nil)
		if c.nfc {
			norm = c.normalizeKey
		}
		p, err := parsePointer(s, norm)
		if err != nil {
			return nil, nil, err
		}
		ptrs = append(ptrs, p)
	}
	return c, ptrs, nil
}

// appendCanonical appends to dst the canonical form of data under c, whose
// Exclude pointers are ptrs (see compile). c and ptrs are only read.
func (c *config) appendCanonical(dst, data []byte, ptrs []pointer) ([]byte, error) {
	v, err := parse(data)
	if err == nil && c.changesTree() {
		err = c.transform(&v, ptrs)
	}
	if err != nil {
		if se, ok := errors.AsType[*SyntaxError](err); ok {
			se.locate(data)
		}
		return nil, err
	}
	return appendCanonical(dst, &v), nil
}
