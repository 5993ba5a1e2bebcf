package fingerprint

import (
	"fmt"
	"strings"
)

// pointer is a parsed RFC 6901 JSON Pointer: its reference tokens, decoded.
type pointer []token

// token is one reference token of a pointer.
type token struct {
	name  string // decoded ("~1" is "/", "~0" is "~"); "*" is a wildcard
	index int    // the array index name spells, or -1 if it spells none
}

// wildcard is the token that matches every member or element.
const wildcard = "*"

// parsePointer parses s as an RFC 6901 JSON Pointer with at least one
// token, applying norm (which may be nil) to each decoded token.
func parsePointer(s string, norm func(string) string) (pointer, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf(`%w %q: must start with "/"`, ErrInvalidPointer, s)
	}
	parts := strings.Split(s[1:], "/")
	ptr := make(pointer, len(parts))
	for i, part := range parts {
		for j := 0; j < len(part); j++ {
			if part[j] == '~' && (j+1 == len(part) || part[j+1] != '0' && part[j+1] != '1') {
				return nil, fmt.Errorf(`%w %q: "~" must be followed by "0" or "1"`, ErrInvalidPointer, s)
			}
		}
		// "~1" first: "~01" is "~1", not "/".
		name := strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if norm != nil && name != wildcard {
			name = norm(name)
		}
		ptr[i] = token{name: name, index: arrayIndex(name)}
	}
	return ptr, nil
}

// arrayIndex returns the array index that s spells in RFC 6901 ("0", or
// digits without a leading zero), or -1.
func arrayIndex(s string) int {
	if s == "" || len(s) > 9 || len(s) > 1 && s[0] == '0' {
		return -1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// matchesMember reports whether t selects the object member named name.
func (t token) matchesMember(name string) bool {
	return t.name == wildcard || t.name == name
}

// matchesElement reports whether t selects the array element at index i.
func (t token) matchesElement(i int) bool {
	return t.name == wildcard || t.index == i
}
