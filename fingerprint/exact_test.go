package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// jsonNumber matches a JSON number, capturing sign, integer part, fraction
// and exponent.
var jsonNumber = regexp.MustCompile(`^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

// decimalOf returns the exact value of the JSON number lit as a string
// "±0.DIGITS×10^N" (digits without leading or trailing zeros; "0" for
// zero), so two literals have the same value exactly when the strings are
// equal. It is an oracle written apart from the parser, using big.Int.
func decimalOf(t testing.TB, lit string) string {
	t.Helper()
	m := jsonNumber.FindStringSubmatch(lit)
	if m == nil {
		t.Fatalf("%q is not a JSON number", lit)
	}
	digits := m[2] + m[3]
	n := big.NewInt(int64(len(m[2])))
	if m[4] != "" {
		e, ok := new(big.Int).SetString(strings.TrimPrefix(m[4], "+"), 10)
		if !ok {
			t.Fatalf("exponent of %q", lit)
		}
		n.Add(n, e)
	}
	trimmed := strings.TrimLeft(digits, "0")
	n.Sub(n, big.NewInt(int64(len(digits)-len(trimmed))))
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return "0"
	}
	return fmt.Sprintf("%s0.%s×10^%s", m[1], trimmed, n)
}

// sameMeaning reports whether a and b, both valid JSON, hold the same
// values, numbers compared by their exact decimal value.
func sameMeaning(t testing.TB, a, b []byte) bool {
	t.Helper()
	decode := func(in []byte) any {
		d := json.NewDecoder(bytes.NewReader(in))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decoding %s: %v", in, err)
		}
		return exactNumbers(t, v)
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

// exactNumbers replaces every json.Number in v by its decimalOf.
func exactNumbers(t testing.TB, v any) any {
	switch v := v.(type) {
	case json.Number:
		return decimalOf(t, string(v))
	case []any:
		for i := range v {
			v[i] = exactNumbers(t, v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = exactNumbers(t, v[k])
		}
	}
	return v
}

// numberLiteral spells ±mant × 10^exp with the decimal point moved point
// places to the left and zeros extra trailing zeros, and an exponent
// written with the given case and sign style.
func numberLiteral(neg bool, mant uint64, point uint8, exp int16, zeros uint8, style uint8) string {
	digits := strconv.FormatUint(mant, 10) + strings.Repeat("0", int(zeros%8))
	e := int(exp) - int(zeros%8)
	p := int(point) % (len(digits) + 2) // may put the point before every digit
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if p >= len(digits) {
		b.WriteString("0." + strings.Repeat("0", p-len(digits)) + digits)
	} else if p == 0 {
		b.WriteString(digits)
	} else {
		b.WriteString(digits[:len(digits)-p] + "." + digits[len(digits)-p:])
	}
	e += p
	switch {
	case e == 0 && style%2 == 0:
	case style%3 == 0:
		fmt.Fprintf(&b, "E%+d", e)
	default:
		fmt.Fprintf(&b, "e%d", e)
	}
	s := b.String()
	if strings.HasPrefix(strings.TrimPrefix(s, "-"), "0") && len(strings.TrimPrefix(s, "-")) > 1 && strings.TrimPrefix(s, "-")[1] != '.' {
		return "" // a leading zero JSON forbids (mant 0 with digits after)
	}
	return s
}

// checkExactNumber checks the number rule on one literal: the canonical
// form denotes the literal's exact value, is its own canonical form, and is
// RFC 8785's form (that of the nearest float64) whenever that form denotes
// the literal's value.
func checkExactNumber(t *testing.T, lit string) []byte {
	t.Helper()
	out, err := Canonicalize([]byte(lit))
	if err != nil {
		t.Fatalf("Canonicalize(%s): %v", lit, err)
	}
	if got, want := decimalOf(t, string(out)), decimalOf(t, lit); got != want {
		t.Fatalf("Canonicalize(%s) = %s, value %s, want value %s", lit, out, got, want)
	}
	if again, err := Canonicalize(out); err != nil || !bytes.Equal(again, out) {
		t.Fatalf("Canonicalize(%s) = %s, not its own canonical form (%s, %v)", lit, out, again, err)
	}
	f, _ := strconv.ParseFloat(lit, 64)
	if !math.IsInf(f, 0) {
		rfc := appendNumber(nil, f)
		if decimalOf(t, string(rfc)) == decimalOf(t, lit) && !bytes.Equal(out, rfc) {
			t.Fatalf("Canonicalize(%s) = %s, want RFC 8785's %s, which denotes the same value", lit, out, rfc)
		}
	}
	return out
}

// FuzzNumberSpelling checks that numbers of equal value share a canonical
// form however they are spelled, and the rule of checkExactNumber.
func FuzzNumberSpelling(f *testing.F) {
	f.Add(false, uint64(9007199254740993), uint8(0), int16(0), uint8(3), uint8(1), uint8(2))
	f.Add(true, uint64(1), uint8(0), int16(400), uint8(0), uint8(0), uint8(1))
	f.Add(false, uint64(1), uint8(1), int16(-1), uint8(0), uint8(5), uint8(0))
	f.Add(false, uint64(1152921504606846976), uint8(0), int16(0), uint8(0), uint8(7), uint8(0))
	f.Add(false, uint64(49), uint8(1), int16(-324), uint8(0), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, neg bool, mant uint64, point uint8, exp int16, zeros, point2, zeros2 uint8) {
		a := numberLiteral(neg, mant, point, exp, zeros, point)
		b := numberLiteral(neg, mant, point2, exp, zeros2, point2)
		if a == "" || b == "" {
			return
		}
		if decimalOf(t, a) != decimalOf(t, b) {
			t.Fatalf("test bug: %s and %s differ in value", a, b)
		}
		ca, cb := checkExactNumber(t, a), checkExactNumber(t, b)
		if !bytes.Equal(ca, cb) {
			t.Fatalf("%s and %s have one value but canonical forms %s and %s", a, b, ca, cb)
		}
	})
}

// FuzzNumberDistinct checks that numbers of different value never share a
// canonical form, on pairs as close as two integers above 2^53 or two
// decimals in their 17th digit.
func FuzzNumberDistinct(f *testing.F) {
	f.Add(uint64(9007199254740992), int8(1), uint8(0), int16(0))
	f.Add(uint64(1152921504606846976), int8(24), uint8(0), int16(0))
	f.Add(uint64(10000000000000000), int8(1), uint8(17), int16(0))
	f.Add(uint64(33333333333333333), int8(-4), uint8(8), int16(0))
	f.Add(uint64(1), int8(1), uint8(0), int16(-324))
	f.Fuzz(func(t *testing.T, mant uint64, delta int8, point uint8, exp int16) {
		mant2 := mant + uint64(int64(delta))
		if delta == 0 || (delta > 0) != (mant2 > mant) {
			return // no change, or wrapped around
		}
		a := numberLiteral(false, mant, point, exp, 0, 0)
		b := numberLiteral(false, mant2, point, exp, 0, 0)
		if a == "" || b == "" || decimalOf(t, a) == decimalOf(t, b) {
			return
		}
		ca, cb := checkExactNumber(t, a), checkExactNumber(t, b)
		if bytes.Equal(ca, cb) {
			t.Fatalf("%s and %s differ in value but share the canonical form %s", a, b, ca)
		}
	})
}

// TestNumberCollisions pins the cases of issue 10, item 6: numbers that
// RFC 8785 maps to one form have distinct fingerprints, and numbers that
// are equal keep sharing one.
func TestNumberCollisions(t *testing.T) {
	t.Parallel()
	distinct := [][2]string{
		{`{"to_account":9007199254740993}`, `{"to_account":9007199254740992}`},
		{`{"to_account":9007199254740993}`, `{"to_account":9007199254740994}`},
		{`1152921504606846976`, `1152921504606847000`}, // 2^60 and its RFC 8785 form
		{`0.1`, `0.1000000000000000055511151231257827021181583404541015625`},
		{`0.1`, `0.10000000000000001`},
		{`1e-400`, `0`},
		{`1e400`, `1.7976931348623157e308`},
		{`333333333.33333329`, `333333333.3333333`},
	}
	for _, d := range distinct {
		a, errA := Sum([]byte(d[0]))
		b, errB := Sum([]byte(d[1]))
		if errA != nil || errB != nil {
			t.Fatalf("Sum: %v, %v", errA, errB)
		}
		if a == b {
			t.Errorf("%s and %s share the fingerprint %s", d[0], d[1], a)
		}
	}
	same := [][2]string{
		{`9007199254740993`, `9007199254740993.0`},
		{`9007199254740993`, `9.007199254740993e15`},
		{`1e400`, `10E+399`},
		{`0.1`, `1e-1`},
		{`-0`, `0.0e10`},
	}
	for _, s := range same {
		a, _ := Sum([]byte(s[0]))
		b, _ := Sum([]byte(s[1]))
		if a != b {
			t.Errorf("%s and %s have one value but fingerprints %s and %s", s[0], s[1], a, b)
		}
	}
}

// TestNumberFloat64Unchanged checks that every float64 written as a JSON
// encoder writes it (shortest round-trip digits, in encoding/json's or
// strconv's spelling) keeps its RFC 8785 form, so fingerprints stored before
// numbers were kept exact still match.
func TestNumberFloat64Unchanged(t *testing.T) {
	t.Parallel()
	bits := []uint64{1, 0x7fefffffffffffff, 0x4340000000000000, 0x4340000000000001, 0x44b52d02c7e14af5, 0x3eb0c6f7a0b5ed8c, 0x43143ff3c1cb0959, 0x4430000000000000, 0x0010000000000000}
	for i := range uint64(2000) {
		bits = append(bits, i*0x9E3779B97F4A7C15) // spread over all exponents
	}
	for _, b := range bits {
		x := math.Float64frombits(b)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		want := appendNumber(nil, x)
		marshalled, _ := json.Marshal(x)
		for _, lit := range []string{string(marshalled), strconv.FormatFloat(x, 'g', -1, 64), strconv.FormatFloat(x, 'e', -1, 64), string(want)} {
			if got, err := Canonicalize([]byte(lit)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("Canonicalize(%s) = %s, %v; want RFC 8785's %s", lit, got, err, want)
			}
		}
	}
}

func TestExactNumbers(t *testing.T) {
	t.Parallel()
	got, err := ExactNumbers([]byte(`{"a/b":[1,9007199254740993,{"~":1e400}],"c":0.1,"d":1e-400}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []ExactNumber{
		{Pointer: "/a~1b/1", Exact: "9007199254740993", RFC8785: "9007199254740992"},
		{Pointer: "/a~1b/2/~0", Exact: "1e+400"},
		{Pointer: "/d", Exact: "1e-400", RFC8785: "0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ExactNumbers = %+v\nwant %+v", got, want)
	}
	if got, err := ExactNumbers([]byte(`{"a":[0.1,2e21,-0]}`)); err != nil || got != nil {
		t.Errorf("ExactNumbers of RFC 8785 numbers = %v, %v; want none", got, err)
	}
	if _, err := ExactNumbers([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Error("ExactNumbers accepted a duplicate key")
	}
}
