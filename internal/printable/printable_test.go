package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Check's rule, case by case.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		s        string
		min, max int
		want     string // "" for nil, else a part of the message
	}{
		{"plain", "order-42/charge", 1, 255, ""},
		{"non-ASCII letters", "größe/注文", 1, 255, ""},
		{"empty allowed", "", 0, 255, ""},
		{"empty refused", "", 1, 255, "must not be empty"},
		{"too short", "ab", 3, 255, "is 2 bytes, shorter than 3"},
		{"exactly max", strings.Repeat("k", 255), 1, 255, ""},
		{"too long", strings.Repeat("k", 256), 1, 255, "is 256 bytes, longer than 255"},
		{"bytes, not runes", strings.Repeat("é", 128), 1, 255, "is 256 bytes"},
		{"invalid UTF-8", "a\xffb", 1, 255, "not valid UTF-8"},
		{"NUL", "a\x00b", 1, 255, "control character U+0000 at byte 1"},
		{"CR LF", "a\r\nb", 1, 255, "control character U+000D at byte 1"},
		{"tab", "a\tb", 1, 255, "U+0009"},
		{"DEL", "a\x7f", 1, 255, "U+007F"},
		{"C1", "a\u0085", 1, 255, "U+0085"},
		{"space is fine", "a b", 1, 255, ""},
	} {
		err := Check(c.s, c.min, c.max)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Check(%q) = %v, want nil", c.name, c.s, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Check(%q) = %v, want an error with %q", c.name, c.s, err, c.want)
		}
	}
}

// Whatever Check accepts is short, valid UTF-8 and free of C0, DEL and C1.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"", "k", "a\nb", "\xff", "注文"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Check(s, 0, 64) != nil {
			return
		}
		cc := func(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }
		if len(s) > 64 || !utf8.ValidString(s) || strings.ContainsFunc(s, cc) {
			t.Fatalf("Check accepted %q", s)
		}
	})
}
