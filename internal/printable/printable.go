// Package printable checks the names idem stores and shows: keys, scopes,
// fingerprints, job kinds, inbox sources, message ids. One rule for all of
// them: valid UTF-8 without control characters, within a length in bytes.
package printable

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns nil if s is printable text of minLen to maxLen bytes:
// valid UTF-8 without control characters (Unicode category Cc: C0 controls
// such as NUL, CR and LF, DEL, and C1 controls). Otherwise its error says
// why, worded to follow the name of what was checked ("key is not valid
// UTF-8"); callers wrap it in their own error type.
func Check(s string, minLen, maxLen int) error {
	switch {
	case s == "" && minLen > 0:
		return fmt.Errorf("must not be empty")
	case len(s) < minLen:
		return fmt.Errorf("is %d bytes, shorter than %d", len(s), minLen)
	case len(s) > maxLen:
		return fmt.Errorf("is %d bytes, longer than %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("is not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("has a control character %U at byte %d", r, i)
		}
	}
	return nil
}
