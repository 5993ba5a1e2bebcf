package fingerprint

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// SyntaxError reports input that is not strict JSON, or that is JSON which
// has no canonical form (a duplicate key, a lone surrogate). It is returned by Canonicalize, Sum and
// Of; match it with errors.As.
type SyntaxError struct {
	// Offset is the zero-based byte offset in the input at which the
	// problem was found.
	Offset int64
	// Line and Column give Offset as a one-based position for people:
	// Column counts characters (UTF-8 sequences), not bytes.
	Line, Column int
	// Msg describes the problem, without position.
	Msg string
}

// Error returns a message of the form
// "fingerprint: invalid JSON at offset 17: duplicate key "a"".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("fingerprint: invalid JSON at offset %d: %s", e.Offset, e.Msg)
}

// locate fills Line and Column from Offset.
func (e *SyntaxError) locate(data []byte) {
	before := data[:min(int(e.Offset), len(data))]
	line, start := 1, 0
	for i, b := range before {
		if b == '\n' {
			line, start = line+1, i+1
		}
	}
	e.Line, e.Column = line, utf8.RuneCount(before[start:])+1
}

// ErrInvalidPointer is returned (wrapped) by Canonicalize, Sum and Of when an
// Exclude option holds a string that is not an RFC 6901 JSON Pointer.
var ErrInvalidPointer = errors.New("fingerprint: invalid JSON pointer")
