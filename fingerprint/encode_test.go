package fingerprint

import (
	"slices"
	"testing"
	"unicode/utf16"
)

func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	// In UTF-16 order; each pair of neighbours is also checked reversed.
	ordered := []string{
		"",
		"\x00",
		"\r",
		"1",
		"a",
		"ab",
		"abc",
		"b",
		"\u0080",
		"\u00f6",
		"\u07ff",
		"\u0800",
		"\u20ac",
		"\ud7ff",
		"\U00010000",   // D800 DC00
		"\U00010000a",  //
		"\U0001F600",   // D83D DE00
		"\U0010FFFF",   // DBFF DFFF
		"\ue000",       // above every surrogate pair
		"\ufb33",       //
		"\ufb33\u0000", //
		"\uffff",
	}
	for i, a := range ordered {
		for j, b := range ordered {
			got := compareUTF16(a, b)
			want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			if sign(got) != want || sign(got) != sign(i-j) {
				t.Errorf("compareUTF16(%+q, %+q) = %d, want sign %d", a, b, got, want)
			}
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func FuzzCompareUTF16(f *testing.F) {
	f.Add("\uffff", "\U00010000")
	f.Add("a\u00e9", "a\U0001F600")
	f.Fuzz(func(t *testing.T, a, b string) {
		a, b = string([]rune(a)), string([]rune(b)) // make valid UTF-8
		want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		if got := sign(compareUTF16(a, b)); got != want {
			t.Fatalf("compareUTF16(%+q, %+q) sign %d, want %d", a, b, got, want)
		}
	})
}

func TestAppendString(t *testing.T) {
	t.Parallel()
	short := map[byte]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`, '"': `\"`, '\\': `\\`}
	const hex = "0123456789abcdef"
	for c := range 0x80 {
		want, ok := short[byte(c)]
		switch {
		case ok:
		case c < 0x20:
			want = `\u00` + string(hex[c>>4]) + string(hex[c&0xf])
		default:
			want = string(rune(c))
		}
		want = `"` + want + `"`
		if got := string(appendString(nil, string(rune(c)))); got != want {
			t.Errorf("appendString(%q) = %s, want %s", rune(c), got, want)
		}
	}
	const mixed = "a\"b\\c\x01d/é€😀\u2028"
	if got, want := string(appendString(nil, mixed)), `"a\"b\\c\u0001d/é€😀`+"\u2028\""; got != want {
		t.Errorf("appendString(%q) = %s, want %s", mixed, got, want)
	}
}
