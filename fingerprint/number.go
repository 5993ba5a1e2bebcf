package fingerprint

import (
	"strconv"
)

// appendNumber appends the RFC 8785 form of a finite f: the result of
// ECMAScript's Number::toString(f) (ECMA-262, section 6.1.6.1.20).
//
// ECMAScript picks the shortest digit string s that reads back as f
// (choosing the one closest to f on a tie in length), which is what
// strconv's shortest formatting computes; the layout around those digits is
// ECMAScript's own, implemented here step by step.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 { // +0 and -0 alike
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// strconv's 'e' form is d[.ddd]e±XX: the digits s (k of them) and the
	// exponent n-1 of ECMAScript's notation, where f = 0.s × 10^n.
	var scratch [32]byte
	e := strconv.AppendFloat(scratch[:0], f, 'e', -1, 64)
	mark := len(e) - 1
	for e[mark] != 'e' {
		mark--
	}
	exp, _ := strconv.Atoi(string(e[mark+1:]))
	n := exp + 1
	digits := make([]byte, 0, 17)
	digits = append(digits, e[0])
	if mark > 1 {
		digits = append(digits, e[2:mark]...) // skip the '.'
	}
	k := len(digits)

	switch {
	case k <= n && n <= 21:
		// Integer: the digits, then n-k zeros.
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		// Decimal point inside the digits.
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		// Small fraction: 0. then -n zeros, then the digits.
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		// Exponential: d[.ddd]e±(n-1).
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
