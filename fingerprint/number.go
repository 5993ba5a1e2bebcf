package fingerprint

import (
	"math/big"
	"strconv"
)

// appendNumber appends the RFC 8785 form of a finite f: the result of
// ECMAScript's Number::toString(f) (ECMA-262, section 6.1.6.1.20).
//
// ECMAScript picks the shortest digit string s that reads back as f
// (choosing the one closest to f on a tie in length), which is what
// strconv's shortest formatting computes; the layout around those digits is
// ECMAScript's own, in appendLayout.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 { // +0 and -0 alike
		return append(dst, '0')
	}
	var buf [24]byte // the digits on the stack
	digits, n := shortest(buf[:0], f)
	return appendLayout(dst, f < 0, digits, n)
}

// shortest appends to dst the shortest digit string s (no leading or
// trailing zeros) that reads back as the finite, non-zero f, and returns it
// with the exponent n with |f| ≈ 0.s × 10^n.
func shortest(dst []byte, f float64) (digits []byte, n int) {
	if f < 0 {
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
	digits = append(dst, e[0])
	if mark > 1 {
		digits = append(digits, e[2:mark]...) // skip the '.'
	}
	return digits, exp + 1
}

// appendLayout appends the number ±0.digits × 10^n in ECMAScript's
// Number::toString layout; digits is non-empty, without leading or trailing
// zeros. Given the shortest digits of a float64 it writes RFC 8785's form;
// given any exact decimal it writes a string that denotes exactly that
// decimal.
func appendLayout(dst []byte, neg bool, digits []byte, n int) []byte {
	if neg {
		dst = append(dst, '-')
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
		dst = appendMantissa(dst, digits)
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendMantissa appends d[.ddd], the digits with a point after the first.
func appendMantissa(dst, digits []byte) []byte {
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	return dst
}

// numberValue returns the parsed value of the number literal lit, whose
// syntax has been checked, given f, the float64 nearest to it (±Inf beyond
// the float64 range).
//
// The number is kept as f whenever that is exact enough: when the RFC 8785
// form of f denotes exactly the literal's value (0.1, 1e23,
// 9007199254740992 and 4.50 all qualify, though only the last two are
// exact as float64). Any other literal (more significant digits than its
// float64 keeps, such as 9007199254740993, or outside the float64 range,
// such as 1e400 and 1e-400) is kept as its exact decimal value, laid out
// as ECMAScript lays out numbers, in the value's str.
//
// Either way the output denotes the literal's value exactly, so two numbers
// of different value never share a canonical form, and the form depends on
// the value alone (9007199254740993, 9007199254740993.0 and
// 90071992547409930e-1 share one). Input that a JSON encoder printed from a
// float64 (shortest round-trip digits) always keeps its RFC 8785 form.
func numberValue(lit []byte, f float64) value {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	mant, expPart := lit, []byte(nil)
	for i, c := range lit {
		if c == 'e' || c == 'E' {
			mant, expPart = lit[:i], lit[i+1:]
			break
		}
	}
	intPart, frac := mant, []byte(nil)
	for i, c := range mant {
		if c == '.' {
			intPart, frac = mant[:i], mant[i+1:]
			break
		}
	}
	// The value is 0.D × 10^(len(intPart) + exp), D = intPart frac.
	digits := make([]byte, 0, len(intPart)+len(frac))
	digits = append(append(digits, intPart...), frac...)
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	digits = digits[lead:]
	end := len(digits)
	for end > 0 && digits[end-1] == '0' {
		end--
	}
	digits = digits[:end]
	if len(digits) == 0 {
		return value{kind: kindNumber} // zero, whatever its sign and exponent
	}

	expNeg := false
	if len(expPart) > 0 && (expPart[0] == '+' || expPart[0] == '-') {
		expNeg = expPart[0] == '-'
		expPart = expPart[1:]
	}
	for len(expPart) > 1 && expPart[0] == '0' {
		expPart = expPart[1:]
	}
	shift := len(intPart) - lead // n without the exponent; |shift| <= len(lit)
	if len(expPart) > 15 {
		// Far outside the float64 range: never a float64 value, and n
		// does not fit an int. Exponential layout with a big exponent.
		n := new(big.Int)
		n.SetString(string(expPart), 10)
		if expNeg {
			n.Neg(n)
		}
		n.Add(n, big.NewInt(int64(shift-1)))
		dst := make([]byte, 0, len(digits)+len(expPart)+4)
		if neg {
			dst = append(dst, '-')
		}
		dst = appendMantissa(dst, digits)
		dst = append(dst, 'e')
		if n.Sign() >= 0 {
			dst = append(dst, '+')
		}
		return value{kind: kindNumber, num: f, str: string(n.Append(dst, 10))}
	}
	exp, _ := strconv.ParseInt(string(expPart), 10, 64) // 0 when absent
	if expNeg {
		exp = -exp
	}
	n := int(exp) + shift

	if f != 0 && f-f == 0 { // finite and not rounded to zero
		var buf [24]byte
		if s, sn := shortest(buf[:0], f); sn == n && string(s) == string(digits) {
			return value{kind: kindNumber, num: f}
		}
	}
	return value{kind: kindNumber, num: f, str: string(appendLayout(nil, neg, digits, n))}
}
