package fingerprint

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizeValue applies the string normalizers of c to a string value:
// NFC first, then trimming or collapsing white space. In that order the
// result is stable: white space is never composed with what follows it, so
// removing or replacing it leaves an NFC string in NFC.
func (c *config) normalizeValue(s string) string {
	if c.nfc {
		s = norm.NFC.String(s)
	}
	switch {
	case c.collapseSpace:
		s = collapseSpace(s)
	case c.trimSpace:
		s = strings.TrimSpace(s)
	}
	return s
}

// normalizeKey applies the normalizers of c that concern object keys.
func (c *config) normalizeKey(s string) string {
	if c.nfc {
		return norm.NFC.String(s)
	}
	return s
}

// collapseSpace trims s and replaces each inner run of white space with one
// ASCII space.
func collapseSpace(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
