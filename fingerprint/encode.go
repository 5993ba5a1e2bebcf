package fingerprint

import (
	"cmp"
	"slices"
	"unicode/utf8"
)

// appendCanonical appends the canonical form of v to dst: RFC 8785's, but
// for numbers it would round (see numberValue). It sorts the
// members of every object in v in place.
func appendCanonical(dst []byte, v *value) []byte {
	switch v.kind {
	case kindNull:
		return append(dst, "null"...)
	case kindFalse:
		return append(dst, "false"...)
	case kindTrue:
		return append(dst, "true"...)
	case kindNumber:
		if v.str != "" {
			return append(dst, v.str...)
		}
		return appendNumber(dst, v.num)
	case kindString:
		return appendString(dst, v.str)
	case kindArray:
		dst = append(dst, '[')
		for i := range v.elems {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, &v.elems[i])
		}
		return append(dst, ']')
	default: // kindObject
		byName := func(a, b member) int { return compareUTF16(a.name, b.name) }
		if !slices.IsSortedFunc(v.members, byName) {
			slices.SortFunc(v.members, byName)
		}
		dst = append(dst, '{')
		for i := range v.members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, v.members[i].name)
			dst = append(dst, ':')
			dst = appendCanonical(dst, &v.members[i].val)
		}
		return append(dst, '}')
	}
}

// appendString appends s, which must be valid UTF-8, as an RFC 8785 string:
// only '"', '\\' and the control characters U+0000 to U+001F are escaped,
// using the two-character forms \b \t \n \f \r where JSON has them and
// \u00xx (lowercase hex) otherwise. Everything else, including '/', U+007F
// and all non-ASCII characters, is written as its UTF-8 bytes.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 orders a and b, which must be valid UTF-8, by their UTF-16
// code units, as RFC 8785 requires for object keys.
//
// UTF-8 byte order is code point order, and UTF-16 order differs from it
// only where a character above U+FFFF (a surrogate pair, D800-DBFF first)
// meets one in U+E000 to U+FFFF: so compare bytes up to the first difference,
// then compare the two characters there as UTF-16 code units.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b) // one is a prefix of the other
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i-- // back to the start of the character that differs
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if (ra > 0xFFFF) != (rb > 0xFFFF) {
		// Exactly one is a surrogate pair: its high surrogate D800-DBFF
		// is what sorts against the other, a single unit outside D800-DFFF.
		ra, rb = highUnit(ra), highUnit(rb)
	}
	return cmp.Compare(ra, rb)
}

// highUnit returns the first UTF-16 code unit of r's encoding.
func highUnit(r rune) rune {
	if r <= 0xFFFF {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}
